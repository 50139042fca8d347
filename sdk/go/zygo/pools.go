package zygo

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

func poolPath(name string, rest ...string) string {
	p := "/v1/pools/" + url.PathEscape(name)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// PoolUp creates or replaces a runtime pool from its zygo.toml (kind = "pool") and returns
// once its shared zygote has imported the preloads (isolation "shared").
func (c *Client) PoolUp(ctx context.Context, manifest []byte) (wire.PoolUpResult, error) {
	var res wire.PoolUpResult
	return res, c.callBody(ctx, "POST", "/v1/pools", bytes.NewReader(manifest), "application/toml", &res)
}

// Pools returns every pool, by name (all pages).
func (c *Client) Pools(ctx context.Context) ([]wire.Pool, error) {
	var all []wire.Pool
	cursor := ""
	for {
		v := url.Values{"limit": {"1000"}}
		if cursor != "" {
			v.Set("cursor", cursor)
		}
		var page wire.PoolPage
		if err := c.call(ctx, "GET", "/v1/pools?"+v.Encode(), nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if cursor = page.NextCursor; cursor == "" {
			return all, nil
		}
	}
}

// Pool returns one pool (IsNotFound when there is none of that name).
func (c *Client) Pool(ctx context.Context, name string) (wire.Pool, error) {
	var out wire.Pool
	return out, c.call(ctx, "GET", poolPath(name), nil, &out)
}

// RemovePool deletes a pool, its zygotes and its tenants' scripts.
func (c *Client) RemovePool(ctx context.Context, name string) error {
	return c.call(ctx, "DELETE", poolPath(name), nil, nil)
}

// PutScript stores a tenant's script in a pool and returns its hash: path is one file
// (stored as main.py) or a directory (sent as a tar of its regular files).
func (c *Client) PutScript(ctx context.Context, pool, tenant, path string) (wire.ScriptResult, error) {
	var body bytes.Buffer
	ctype := "application/octet-stream"
	st, err := os.Stat(path)
	if err != nil {
		return wire.ScriptResult{}, err
	}
	if st.IsDir() {
		if err := tarDir(path, &body); err != nil {
			return wire.ScriptResult{}, err
		}
		ctype = wire.TarContentType
	} else {
		b, err := os.ReadFile(path)
		if err != nil {
			return wire.ScriptResult{}, err
		}
		body.Write(b)
	}
	var out wire.ScriptResult
	q := url.Values{"tenant": {tenant}}
	return out, c.callBody(ctx, "PUT", poolPath(pool, "scripts")+"?"+q.Encode(), &body, ctype, &out)
}

// tarDir writes the regular files under dir (relative paths) as a tar.
func tarDir(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err != nil {
		return fmt.Errorf("packing %s: %w", dir, err)
	}
	return tw.Close()
}

// PoolRunResult is a script's value and the request's metadata.
type PoolRunResult struct {
	Value     json.RawMessage
	RequestID string
	Script    string // the hash that ran
	Lane      string // shared or tenant:T
	Mounted   bool   // false: the script was copied into the request directory (see the logs)
	Elapsed   time.Duration
}

// RunScript runs a script in a pool. A request that failed is an *Error as for Invoke; one
// refused because its tenant is over its caps has code wire.CodeTooManyRequests.
func (c *Client) RunScript(ctx context.Context, pool string, req wire.PoolRunRequest) (*PoolRunResult, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encoding request: %w", err)
	}
	t0 := time.Now()
	resp, err := c.do(ctx, "POST", poolPath(pool, "run"), bytes.NewReader(b), "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	v, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the result of pool %s: %w", pool, err)
	}
	mounted, _ := strconv.ParseBool(resp.Header.Get(wire.MountedHeader))
	return &PoolRunResult{Value: bytes.TrimSpace(v), RequestID: resp.Header.Get(wire.RequestIDHeader),
		Script: resp.Header.Get(wire.ScriptHeader), Lane: resp.Header.Get(wire.LaneHeader),
		Mounted: mounted, Elapsed: time.Since(t0)}, nil
}

// PoolLogs returns a page of a pool's log lines (its requests' output and Zygo's line per
// request), oldest first.
func (c *Client) PoolLogs(ctx context.Context, pool string, q LogsQuery) (wire.LogsBody, error) {
	v := url.Values{}
	if q.RequestID != "" {
		v.Set("request", q.RequestID)
	}
	v.Set("after", strconv.FormatInt(q.After, 10))
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out wire.LogsBody
	return out, c.call(ctx, "GET", poolPath(pool, "logs")+"?"+v.Encode(), nil, &out)
}
