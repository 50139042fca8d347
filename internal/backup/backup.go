// Package backup copies a daemon's state dir into a backup directory and back (`zygo backup`,
// `zygo restore`). A backup holds what cannot be made again:
//
//	zygo.db             the store (functions, versions, secrets sealed with secret.key,
//	                    uid allocations, sandbox and checkpoint records, logs), copied
//	                    online with SQLite's VACUUM INTO
//	secret.key          the key the secrets are sealed with (mode 0600)
//	api.token           the TCP API's bearer token, when there is one
//	versions/NAME/H/    every stored version's code
//	images/ID/          checkpoint images, only with Options.Checkpoints (they can be large)
//	zygo-backup.json    the Manifest: what is included, each file's size and SHA-256
//
// Never in a backup: running sandboxes (a restored daemon marks their records dead), the
// images of checkpoints of sandboxes with secrets (kept in memory only, by design), and what a
// daemon makes again at start (agents/, etc/, run/, the engine dir). The backup directory
// holds the secret key: it is made 0700 and must be kept as the key itself is.
//
// Everything read from the state dir is read through internal/untrusted (no symbolic links,
// regular files only): checkpoint images are written by sandbox engines.
package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/store"
	"github.com/zygo-run/zygo/internal/untrusted"
)

// ManifestFile is the name of a backup's Manifest inside its directory.
const ManifestFile = "zygo-backup.json"

// Format is the version of the backup layout this package writes and reads.
const Format = 1

// Names of what a backup holds, relative to the state dir and to the backup dir alike.
const (
	dbFile     = "zygo.db"
	keyFile    = "secret.key"
	tokenFile  = "api.token"
	versionDir = "versions"
	imageDir   = "images"
)

// maxEntries bounds the entries of one directory copied (untrusted.Dir.Names).
const maxEntries = 1 << 20

// Options says what Create includes beyond the store, the key and the versions.
type Options struct {
	// Checkpoints includes the checkpoint images (STATE/images): without them the checkpoint
	// records come back, but forking or rolling back to them fails until they are taken again.
	Checkpoints bool
	// ZygoVersion is recorded in the Manifest.
	ZygoVersion string
}

// Manifest describes a backup.
type Manifest struct {
	Format      int       `json:"format"`
	CreatedAt   time.Time `json:"created_at"`
	ZygoVersion string    `json:"zygo_version"`
	StateDir    string    `json:"state_dir"` // the state dir backed up (absolute), for the operator
	// Includes says which parts are in the backup.
	Includes Includes `json:"includes"`
	Files    []File   `json:"files"` // every file, sorted by path
}

// Includes lists the parts of a backup.
type Includes struct {
	Store       bool `json:"store"`
	SecretKey   bool `json:"secret_key"`
	APIToken    bool `json:"api_token"`
	Versions    int  `json:"versions"` // version directories
	Checkpoints bool `json:"checkpoints"`
}

// File is one file of a backup.
type File struct {
	Path   string `json:"path"` // slash-separated, relative to the backup dir
	Size   int64  `json:"size"` // bytes
	SHA256 string `json:"sha256"`
	Mode   uint32 `json:"mode"` // permission bits
}

// Create backs up stateDir into dir, which must not exist or be empty (it is made 0700). It
// runs while a daemon serves (the store is copied online), and fails, keeping nothing, when a
// version the copied store records is missing from the copy (one was removed meanwhile: run
// it again). Errors wrap errdefs.ErrInvalidArgument for a bad dir or state dir.
func Create(ctx context.Context, stateDir, dir string, opts Options) (_ *Manifest, err error) {
	if _, err := os.Stat(filepath.Join(stateDir, dbFile)); err != nil {
		return nil, fmt.Errorf("%w: %s holds no Zygo state (%s): %w", errdefs.ErrInvalidArgument, stateDir, dbFile, err)
	}
	if err := makeEmptyDir(dir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			removeContents(dir)
		}
	}()
	src, err := untrusted.OpenDir(stateDir)
	if err != nil {
		return nil, fmt.Errorf("opening the state dir: %w", err)
	}
	defer src.Close()
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, err
	}
	m := &Manifest{Format: Format, CreatedAt: time.Now().UTC(), ZygoVersion: opts.ZygoVersion, StateDir: abs}
	if err := store.Snapshot(ctx, filepath.Join(stateDir, dbFile), filepath.Join(dir, dbFile)); err != nil {
		return nil, err
	}
	m.Includes.Store = true
	for _, name := range []string{keyFile, tokenFile} {
		switch err := copyFile(ctx, src, name, dir, name); {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, err
		case name == keyFile:
			m.Includes.SecretKey = true
		default:
			m.Includes.APIToken = true
		}
	}
	if err := copyTree(ctx, src, versionDir, dir); err != nil {
		return nil, err
	}
	if m.Includes.Versions, err = checkVersions(ctx, dir); err != nil {
		return nil, err
	}
	if opts.Checkpoints {
		if err := copyTree(ctx, src, imageDir, dir); err != nil {
			return nil, err
		}
		m.Includes.Checkpoints = true
	}
	if m.Files, err = listFiles(dir); err != nil {
		return nil, err
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), append(b, '\n'), 0o600); err != nil {
		return nil, fmt.Errorf("writing the backup's manifest: %w", err)
	}
	return m, nil
}

// checkVersions fails unless every version the copied store records has its directory in the
// backup dir; it returns how many there are.
func checkVersions(ctx context.Context, dir string) (int, error) {
	vs, err := store.SnapshotVersions(ctx, filepath.Join(dir, dbFile))
	if err != nil {
		return 0, err
	}
	for _, v := range vs {
		p := filepath.Join(dir, versionDir, v.Function, versionName(v.Hash))
		if st, err := os.Stat(p); err != nil || !st.IsDir() {
			return 0, fmt.Errorf("version %s of %q is in the store but its code is not (removed while the backup ran?): run the backup again",
				versionName(v.Hash), v.Function)
		}
	}
	return len(vs), nil
}

// versionName is the directory name of a version hash ("sha256:HEX"): as the function
// manager names it, the first 32 hex digits.
func versionName(hash string) string {
	h := strings.TrimPrefix(hash, "sha256:")
	if len(h) > 32 {
		h = h[:32]
	}
	return h
}

// makeEmptyDir makes dir 0700, or accepts it when it exists empty.
func makeEmptyDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: creating the backup dir: %w", errdefs.ErrInvalidArgument, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%w: backup dir: %w", errdefs.ErrInvalidArgument, err)
	}
	if len(ents) > 0 {
		return fmt.Errorf("%w: backup dir %s is not empty: give a new or empty directory", errdefs.ErrInvalidArgument, dir)
	}
	return os.Chmod(dir, 0o700)
}

// removeContents empties dir (a failed backup's), keeping dir itself.
func removeContents(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// copyTree copies the directory name of src (a missing one is nothing to copy) to dstRoot/name,
// directories 0700, files with their permission bits; anything but directories and regular
// files (a symbolic link a sandbox engine planted) is an error naming it.
func copyTree(ctx context.Context, src *untrusted.Dir, name, dstRoot string) error {
	sub, err := src.Sub(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("copying %s: %w", name, err)
	}
	defer sub.Close()
	if err := os.MkdirAll(filepath.Join(dstRoot, name), 0o700); err != nil {
		return fmt.Errorf("copying %s: %w", name, err)
	}
	names, err := sub.Names(maxEntries)
	if err != nil {
		return fmt.Errorf("copying %s: %w", name, err)
	}
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		rel := path.Join(name, n)
		if strings.HasSuffix(n, ".partial") {
			continue // a version being written (function.Unpacked.WriteTo)
		}
		err := copyTreeEntry(ctx, sub, n, filepath.Join(dstRoot, name))
		if err != nil {
			return fmt.Errorf("copying %s: %w", rel, err)
		}
	}
	return nil
}

// copyTreeEntry copies entry n of dir to dst/n: a directory by copyTree, else a regular file.
func copyTreeEntry(ctx context.Context, dir *untrusted.Dir, n, dst string) error {
	if inner, err := dir.Sub(n); err == nil {
		inner.Close()
		return copyTree(ctx, dir, n, dst)
	}
	return copyFile(ctx, dir, n, dst, n)
}

// copyFile copies the regular file name of src to dstDir/dstName (with its permission bits,
// never over an existing file). A missing file is an error wrapping os.ErrNotExist.
func copyFile(ctx context.Context, src *untrusted.Dir, name, dstDir, dstName string) error {
	in, err := src.Open(name)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(filepath.Join(dstDir, dstName), os.O_WRONLY|os.O_CREATE|os.O_EXCL, st.Mode().Perm()|0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, readerCtx{ctx, in})
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil { // the mode it had (0440 for code); the backup's owner reads it still
		err = os.Chmod(filepath.Join(dstDir, dstName), st.Mode().Perm())
	}
	return err
}

// readerCtx stops a long copy when its context ends.
type readerCtx struct {
	ctx context.Context
	r   io.Reader
}

func (r readerCtx) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

// listFiles returns every regular file under dir with its size, SHA-256 and mode, sorted.
func listFiles(dir string) ([]File, error) {
	var out []File
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		sum, size, err := hashFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, File{Path: filepath.ToSlash(rel), Size: size, SHA256: sum, Mode: uint32(info.Mode().Perm())})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the backup: %w", err)
	}
	return out, nil
}

// hashFile returns the hex SHA-256 and size of the file at p.
func hashFile(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
