package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

func sandboxPath(id string, rest ...string) string {
	p := "/v1/sandboxes/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

func jsonBody(v any) (io.Reader, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding request: %w", err)
	}
	return bytes.NewReader(b), nil
}

func (c *Client) postJSON(ctx context.Context, path string, in, out any) error {
	body, err := jsonBody(in)
	if err != nil {
		return err
	}
	return c.getJSON(ctx, "POST", path, body, "application/json", out)
}

// CreateSandbox starts a sandbox and returns its record once it answers.
func (c *Client) CreateSandbox(ctx context.Context, opts CreateSandboxBody) (sandbox.SandboxRecord, error) {
	var rec sandbox.SandboxRecord
	return rec, c.postJSON(ctx, "/v1/sandboxes", opts, &rec)
}

// GetSandbox returns the record of the sandbox with that id or name.
func (c *Client) GetSandbox(ctx context.Context, id string) (sandbox.SandboxRecord, error) {
	var rec sandbox.SandboxRecord
	return rec, c.getJSON(ctx, "GET", sandboxPath(id), nil, "", &rec)
}

// ListSandboxes returns every sandbox, oldest first.
func (c *Client) ListSandboxes(ctx context.Context) ([]sandbox.SandboxRecord, error) {
	var out []sandbox.SandboxRecord
	return out, c.getJSON(ctx, "GET", "/v1/sandboxes", nil, "", &out)
}

// RemoveSandbox destroys a sandbox; its checkpoints stay.
func (c *Client) RemoveSandbox(ctx context.Context, id string) error {
	return c.getJSON(ctx, "DELETE", sandboxPath(id), nil, "", nil)
}

// stream posts in and copies the NDJSON answer's output to stdout and stderr (either may be
// nil) until the final event, which it returns. An error event becomes an *Error.
func (c *Client) stream(ctx context.Context, path string, in any, stdout, stderr io.Writer) (StreamEvent, error) {
	body, err := jsonBody(in)
	if err != nil {
		return StreamEvent{}, err
	}
	return c.streamBody(ctx, path, body, "application/json", stdout, stderr)
}

// streamBody is stream with the request body given.
func (c *Client) streamBody(ctx context.Context, path string, body io.Reader, ctype string, stdout, stderr io.Writer) (StreamEvent, error) {
	resp, err := c.do(ctx, "POST", path, body, ctype)
	if err != nil {
		return StreamEvent{}, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev StreamEvent
		if err := dec.Decode(&ev); err != nil {
			return StreamEvent{}, fmt.Errorf("reading the daemon's answer to %s: %w", path, err)
		}
		switch {
		case ev.Error != nil:
			return StreamEvent{}, &Error{Status: statusOfCode(ev.Error.Code), Body: *ev.Error}
		case ev.Exit != nil || ev.Result != nil:
			return ev, nil
		case ev.Stream == "stdout" && stdout != nil:
			if _, err := stdout.Write(ev.Data); err != nil {
				return StreamEvent{}, err
			}
		case ev.Stream == "stderr" && stderr != nil:
			if _, err := stderr.Write(ev.Data); err != nil {
				return StreamEvent{}, err
			}
		}
	}
}

// Exec runs a command in the sandbox, streaming its output, and returns its exit status. A
// command that cannot start (a missing binary) is an *Error (404), not a status. req.Stdin,
// if any, travels in the JSON and is bounded by MaxSandboxJSONBytes; ExecStream streams it.
func (c *Client) Exec(ctx context.Context, id string, req ExecBody, stdout, stderr io.Writer) (guest.ExitStatus, error) {
	ev, err := c.stream(ctx, sandboxPath(id, "exec"), req, stdout, stderr)
	if err != nil {
		return guest.ExitStatus{}, err
	}
	if ev.Exit == nil {
		return guest.ExitStatus{}, fmt.Errorf("exec answer ended without an exit status")
	}
	return *ev.Exit, nil
}

// ExecStream is Exec with the command's stdin streamed from stdin: the command starts at once,
// reads what stdin yields as it comes, and sees EOF when stdin does; its output streams back
// meanwhile. req.Stdin must be empty. ExecStream never closes stdin. When the command exits
// before stdin's EOF, ExecStream returns without waiting for it: one Read of stdin may still be
// in flight then, and what it returns is dropped.
func (c *Client) ExecStream(ctx context.Context, id string, req ExecBody, stdin io.Reader, stdout, stderr io.Writer) (guest.ExitStatus, error) {
	if req.Stdin != nil {
		return guest.ExitStatus{}, fmt.Errorf("exec: stdin given twice (in the body and streamed)")
	}
	req.StdinStream = true
	b, err := json.Marshal(req)
	if err != nil {
		return guest.ExitStatus{}, fmt.Errorf("encoding request: %w", err)
	}
	// MultiReader hides stdin's Close from the transport, which closes request bodies.
	body := io.MultiReader(bytes.NewReader(append(b, '\n')), stdin)
	ev, err := c.streamBody(ctx, sandboxPath(id, "exec"), body, "application/octet-stream", stdout, stderr)
	if err != nil {
		return guest.ExitStatus{}, err
	}
	if ev.Exit == nil {
		return guest.ExitStatus{}, fmt.Errorf("exec answer ended without an exit status")
	}
	return *ev.Exit, nil
}

// RunCode runs Python in the sandbox's persistent interpreter, streaming what it prints. A
// Python exception is a result with OK false, not an error.
func (c *Client) RunCode(ctx context.Context, id string, req CodeBody, stdout, stderr io.Writer) (guest.CodeResult, error) {
	ev, err := c.stream(ctx, sandboxPath(id, "run-code"), req, stdout, stderr)
	if err != nil {
		return guest.CodeResult{}, err
	}
	if ev.Result == nil {
		return guest.CodeResult{}, fmt.Errorf("run-code answer ended without a result")
	}
	return *ev.Result, nil
}

// PutFile writes r to the absolute path inside the sandbox with permission bits mode.
func (c *Client) PutFile(ctx context.Context, id, path string, mode uint32, r io.Reader) error {
	q := url.Values{"path": {path}, "mode": {strconv.FormatUint(uint64(mode), 8)}}
	return c.getJSON(ctx, "PUT", sandboxPath(id, "files")+"?"+q.Encode(), r, "application/octet-stream", nil)
}

// GetFile copies the file at path inside the sandbox to w.
func (c *Client) GetFile(ctx context.Context, id, path string, w io.Writer) error {
	resp, err := c.do(ctx, "GET", sandboxPath(id, "files")+"?"+url.Values{"path": {path}}.Encode(), nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

// ListFiles lists the directory at path inside the sandbox: at most guest.MaxListEntries
// entries in name order, and the directory's total (Listing.Total).
func (c *Client) ListFiles(ctx context.Context, id, path string) (guest.Listing, error) {
	var out guest.Listing
	resp, err := c.do(ctx, "GET", sandboxPath(id, "files", "list")+"?"+url.Values{"path": {path}}.Encode(), nil, "")
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&out.Entries); err != nil {
		return out, fmt.Errorf("decoding listing: %w", err)
	}
	out.Total = len(out.Entries)
	if n, err := strconv.Atoi(resp.Header.Get(EntriesTotalHeader)); err == nil && n > out.Total {
		out.Total = n
	}
	return out, nil
}

// Checkpoint saves an immutable image of the running sandbox, which keeps running.
func (c *Client) Checkpoint(ctx context.Context, id, tag string) (sandbox.CheckpointRecord, error) {
	var cp sandbox.CheckpointRecord
	return cp, c.postJSON(ctx, sandboxPath(id, "checkpoint"), CheckpointBody{Tag: tag}, &cp)
}

// Checkpoints lists checkpoints, oldest first: every one when sandboxID is empty. An unknown
// sandbox is a 404 (*Error), not an empty list.
func (c *Client) Checkpoints(ctx context.Context, sandboxID string) ([]sandbox.CheckpointRecord, error) {
	var out []sandbox.CheckpointRecord
	p := "/v1/checkpoints"
	if sandboxID != "" {
		p = sandboxPath(sandboxID, "checkpoints")
	}
	return out, c.getJSON(ctx, "GET", p, nil, "", &out)
}

// RemoveCheckpoint deletes a checkpoint's image and record; refused (409) while a sandbox or a
// checkpoint refers to it.
func (c *Client) RemoveCheckpoint(ctx context.Context, checkpoint string) error {
	return c.getJSON(ctx, "DELETE", "/v1/checkpoints/"+url.PathEscape(checkpoint), nil, "", nil)
}

// Fork restores n resealed children of sandbox id (from checkpoint from, or a new one). It
// returns the answer, with every child's outcome, and nil when at least one child runs; when
// every child failed, the answer and an *Error. progress, when not nil, is called (from this
// goroutine) as the daemon reports each child ready or failed; the daemon then streams
// ForkEvents. Errors before any child is attempted are *Error (400 for a bad n, 404 for an
// unknown sandbox or checkpoint), or *Unreachable when no daemon answers.
func (c *Client) Fork(ctx context.Context, id string, n int, from string, progress func(sandbox.ForkProgress)) (ForkAnswer, error) {
	var ans ForkAnswer
	body, err := jsonBody(ForkBody{N: n, From: from})
	if err != nil {
		return ans, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", c.base+sandboxPath(id, "fork"), body)
	if err != nil {
		return ans, err
	}
	req.Header.Set("Content-Type", "application/json")
	if progress != nil {
		req.Header.Set("Accept", ForkStreamType)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return ans, &Unreachable{err}
	}
	defer resp.Body.Close()
	status := resp.StatusCode
	if resp.Header.Get("Content-Type") == ForkStreamType {
		dec := json.NewDecoder(resp.Body)
		for {
			var ev ForkEvent
			if err := dec.Decode(&ev); err != nil {
				return ans, fmt.Errorf("reading fork progress: the stream ended before the answer: %w", err)
			}
			if ev.Progress != nil {
				progress(*ev.Progress)
				continue
			}
			if ev.Answer != nil {
				ans, status = *ev.Answer, ev.Status
				break
			}
		}
	} else {
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return ans, fmt.Errorf("reading fork answer: %w", err)
		}
		if err := json.Unmarshal(raw, &ans); err != nil {
			return ans, &Error{Status: resp.StatusCode, Body: ErrorBody{Code: "http",
				Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(raw))}}
		}
	}
	if status >= 300 {
		eb := ErrorBody{Code: "http", Message: fmt.Sprintf("HTTP %d", status)}
		if ans.Error != nil {
			eb = *ans.Error
		}
		return ans, &Error{Status: status, Body: eb}
	}
	return ans, nil
}

// Rollback replaces the sandbox's running copy with a restore of the checkpoint, keeping its
// id, and returns the record (with its new generation).
func (c *Client) Rollback(ctx context.Context, id, checkpoint string) (sandbox.SandboxRecord, error) {
	var rec sandbox.SandboxRecord
	return rec, c.postJSON(ctx, sandboxPath(id, "rollback"), RollbackBody{To: checkpoint}, &rec)
}

// Services returns the live state of the sandbox's declared services (see guest.ServiceStatus),
// or an *Error (404 for an unknown sandbox, 409 for a dead one).
func (c *Client) Services(ctx context.Context, id string) ([]guest.ServiceStatus, error) {
	var st []guest.ServiceStatus
	return st, c.getJSON(ctx, "GET", sandboxPath(id, "services"), nil, "", &st)
}

// Generation returns the sandbox's current generation token.
func (c *Client) Generation(ctx context.Context, id string) (GenerationBody, error) {
	var g GenerationBody
	return g, c.getJSON(ctx, "GET", sandboxPath(id, "generation"), nil, "", &g)
}
