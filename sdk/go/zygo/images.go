package zygo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// CheckpointImage is an exported checkpoint image being read: Body is its tar, Size its
// length in bytes and SHA256 its digest (64 hex digits), both announced by the daemon before
// the first byte. The caller closes Body. A Body that ends before Size bytes was cut (the
// exporting daemon failed mid-stream); the importer's SHA-256 check refuses it anyway.
type CheckpointImage struct {
	Checkpoint string // the exported checkpoint's id
	Size       int64
	SHA256     string
	Body       io.ReadCloser
}

// ExportCheckpoint starts reading the image of checkpoint (an id or tag) as a tar, for
// ImportCheckpoint on another daemon. Errors: *Error (404 unknown; 409 an image of a sandbox
// that holds secrets, which is never exported, or a lost or corrupted one), *Unreachable.
func (c *Client) ExportCheckpoint(ctx context.Context, checkpoint string) (*CheckpointImage, error) {
	resp, err := c.do(ctx, "GET", "/v1/checkpoints/"+url.PathEscape(checkpoint)+"/image", nil, "")
	if err != nil {
		return nil, err
	}
	img := &CheckpointImage{Checkpoint: resp.Header.Get(wire.ImageCheckpointHeader), Size: resp.ContentLength,
		SHA256: resp.Header.Get(wire.ImageSHA256Header), Body: resp.Body}
	if img.SHA256 == "" || img.Size < 0 {
		resp.Body.Close()
		return nil, fmt.Errorf("exporting %s: the daemon did not announce the image's size and %s", checkpoint, wire.ImageSHA256Header)
	}
	return img, nil
}

// ImportCheckpoint sends the tar r (size bytes; -1 when unknown) to the daemon as a new
// checkpoint, which it checks against sha256 (the exporter's CheckpointImage.SHA256) before
// it exists; tag, when not "", is its tag. It returns the new checkpoint, whose id is the
// importing daemon's own; Restore copies it. Errors: *Error (400 a malformed or altered
// image, naming what; 413 over the daemon's --checkpoint-import-max-mib; 409 an image this
// daemon cannot restore: another backend, a template it lacks), *Unreachable, *BodyError.
func (c *Client) ImportCheckpoint(ctx context.Context, r io.Reader, size int64, sha256, tag string) (wire.Checkpoint, error) {
	var cp wire.Checkpoint
	q := url.Values{"sha256": {sha256}}
	if tag != "" {
		q.Set("tag", tag)
	}
	req, err := http.NewRequestWithContext(ctx, "POST", c.base+"/v1/checkpoints/import?"+q.Encode(), r)
	if err != nil {
		return cp, fmt.Errorf("making import request: %w", err)
	}
	req.Header.Set("Content-Type", wire.TarContentType)
	if size >= 0 {
		req.ContentLength = size
	}
	resp, err := c.send(ctx, req)
	if err != nil {
		return cp, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&cp); err != nil {
		return cp, fmt.Errorf("decoding the import's answer: %w", err)
	}
	return cp, nil
}
