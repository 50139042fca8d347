package zygo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// MaxForkN is the daemon's bound on Fork's n (a larger n is refused with IsBadRequest).
const MaxForkN = 16

// Checkpoint is an immutable image of a sandbox at one moment. Images form a tree: ParentID
// is the checkpoint the source sandbox was itself restored from.
type Checkpoint struct {
	ID        string    `json:"id"`
	Tag       string    `json:"tag,omitempty"`
	SandboxID string    `json:"sandbox_id"`
	ParentID  string    `json:"parent_id,omitempty"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
}

// Checkpoint saves an image of the running sandbox, which keeps running. tag may be empty; a
// tag can stand for the checkpoint's id in Fork, Rollback and RemoveCheckpoint (the newest
// checkpoint with that tag).
func (sb *Sandbox) Checkpoint(ctx context.Context, tag string) (Checkpoint, error) {
	var cp Checkpoint
	return cp, sb.c.call(ctx, "POST", sbPath(sb.ID, "checkpoint"), map[string]string{"tag": tag}, &cp)
}

// Checkpoints lists checkpoints, oldest first: every one when sandboxID is empty, else those
// taken of that sandbox (id or name; a removed sandbox's id still lists its checkpoints). An
// unknown sandbox is an error (IsNotFound), not an empty list.
func (c *Client) Checkpoints(ctx context.Context, sandboxID string) ([]Checkpoint, error) {
	p := "/v1/checkpoints"
	if sandboxID != "" {
		p = sbPath(sandboxID, "checkpoints")
	}
	var out []Checkpoint
	return out, c.call(ctx, "GET", p, nil, &out)
}

// RemoveCheckpoint deletes a checkpoint. It is refused (IsConflict) while a sandbox was
// restored from it or another checkpoint descends from it.
func (c *Client) RemoveCheckpoint(ctx context.Context, idOrTag string) error {
	return c.call(ctx, "DELETE", "/v1/checkpoints/"+url.PathEscape(idOrTag), nil, nil)
}

// ForkChild is one child of a fork: a running, resealed sandbox, or the error that made the
// daemon destroy it.
type ForkChild struct {
	Sandbox *Sandbox
	Err     error
}

// ForkResult is every child of a fork, in order, and the checkpoint they were restored from.
type ForkResult struct {
	Checkpoint Checkpoint
	Children   []ForkChild
}

// Running returns the children that run.
func (r ForkResult) Running() []*Sandbox {
	var out []*Sandbox
	for _, c := range r.Children {
		if c.Sandbox != nil {
			out = append(out, c.Sandbox)
		}
	}
	return out
}

// Fork makes n independent copies of the sandbox, restored in parallel from checkpoint from
// (an id or tag), or from a fresh checkpoint when from is empty. Each copy has its own id,
// name, generation, hostname and machine id. Partial success is not an error: check each
// child. The error is non-nil when the fork was refused (a bad n: IsBadRequest) or when every
// child failed (the result still lists why).
func (sb *Sandbox) Fork(ctx context.Context, n int, from string) (ForkResult, error) {
	b, err := json.Marshal(map[string]any{"n": n, "from": from})
	if err != nil {
		return ForkResult{}, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", sb.c.base+sbPath(sb.ID, "fork"), bytes.NewReader(b))
	if err != nil {
		return ForkResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := sb.c.hc.Do(req)
	if err != nil {
		return ForkResult{}, fmt.Errorf("zygo daemon unreachable: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return ForkResult{}, err
	}
	// 200: at least one child runs. Otherwise an error, with the children when some were tried.
	var ans struct {
		Error      *Error     `json:"error"`
		Checkpoint Checkpoint `json:"checkpoint"`
		Children   []struct {
			Sandbox *Sandbox `json:"sandbox"`
			Error   *Error   `json:"error"`
		} `json:"children"`
	}
	if json.Unmarshal(raw, &ans) != nil {
		return ForkResult{}, &Error{Status: resp.StatusCode, Code: "http", Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(raw))}
	}
	res := ForkResult{Checkpoint: ans.Checkpoint}
	for _, ch := range ans.Children {
		fc := ForkChild{Sandbox: ch.Sandbox}
		if ch.Error != nil {
			fc.Sandbox, fc.Err = nil, ch.Error
		} else if fc.Sandbox != nil {
			fc.Sandbox.c = sb.c
		}
		res.Children = append(res.Children, fc)
	}
	if resp.StatusCode >= 300 {
		e := ans.Error
		if e == nil {
			e = &Error{Code: "http", Message: fmt.Sprintf("HTTP %d", resp.StatusCode)}
		}
		e.Status = resp.StatusCode
		return res, e
	}
	return res, nil
}

// Rollback replaces the sandbox's running copy with a restore of the checkpoint (an id or
// tag): anything written since is gone; the id and name stay; the generation is new. On error
// the sandbox runs on as it was. sb is updated in place.
func (sb *Sandbox) Rollback(ctx context.Context, checkpoint string) error {
	next := Sandbox{c: sb.c}
	if err := sb.c.call(ctx, "POST", sbPath(sb.ID, "rollback"), map[string]string{"to": checkpoint}, &next); err != nil {
		return err
	}
	*sb = next
	return nil
}
