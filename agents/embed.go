// Package agents embeds the language agents (agents/python, later
// agents/node) into the zygo binary and extracts them into the state
// directory, where the ns sandbox binds them read-only at /opt/zygo/agents.
package agents

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed python/zygo_agent/*.py node/*.js
var files embed.FS

// Extract writes the embedded agents under root/<content hash>/ (skipped
// when that directory already exists) and returns that directory. Files are
// world-readable and read-only, so a sandbox running as an unprivileged uid
// can read them.
func Extract(root string) (string, error) {
	h := sha256.New()
	var paths []string
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("reading embedded agents: %w", err)
	}
	dir := filepath.Join(root, hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(root, ".extract-")
	if err != nil {
		return "", fmt.Errorf("extracting agents: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, p := range paths {
		b, _ := files.ReadFile(p)
		dst := filepath.Join(tmp, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", fmt.Errorf("extracting agents: %w", err)
		}
		if err := os.WriteFile(dst, b, 0o444); err != nil {
			return "", fmt.Errorf("extracting agents: %w", err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
		return "", fmt.Errorf("extracting agents: %w", err)
	}
	return dir, nil
}
