package zygo

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"net/url"
	"strconv"
	"time"
)

// FileInfo describes one directory entry inside a sandbox.
type FileInfo struct {
	Name    string      `json:"name"`
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"`
	ModTime time.Time   `json:"mod_time"`
	IsDir   bool        `json:"is_dir"`
}

// WriteFile writes data to the absolute path inside the sandbox with permission bits perm,
// creating parent directories. The file appears whole or not at all.
func (sb *Sandbox) WriteFile(ctx context.Context, path string, data []byte, perm fs.FileMode) error {
	q := url.Values{"path": {path}, "mode": {strconv.FormatUint(uint64(perm.Perm()), 8)}}
	resp, err := sb.c.do(ctx, "PUT", sbPath(sb.ID, "files")+"?"+q.Encode(), bytes.NewReader(data), "application/octet-stream")
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// ReadFile returns the content of the file at the absolute path inside the sandbox.
func (sb *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	resp, err := sb.c.do(ctx, "GET", sbPath(sb.ID, "files")+"?"+url.Values{"path": {path}}.Encode(), nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// ListFiles lists the directory at the absolute path inside the sandbox: at most 10 000
// entries, the first in name order (the daemon's bound; the response header
// Zygo-Entries-Total has the directory's count).
func (sb *Sandbox) ListFiles(ctx context.Context, path string) ([]FileInfo, error) {
	var out []FileInfo
	return out, sb.c.call(ctx, "GET", sbPath(sb.ID, "files", "list")+"?"+url.Values{"path": {path}}.Encode(), nil, &out)
}
