package zygo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// The Client's sandbox calls by id: each takes a sandbox id or name (a checkpoint id or tag
// where it says checkpoint) and answers the daemon's records as they are (package wire).

func sbPath(id string, rest ...string) string {
	p := "/v1/sandboxes/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// CreateSandbox starts a sandbox and returns its record once its guest agent answers.
func (c *Client) CreateSandbox(ctx context.Context, opts wire.CreateSandboxBody) (wire.Sandbox, error) {
	var rec wire.Sandbox
	return rec, c.call(ctx, "POST", "/v1/sandboxes", opts, &rec)
}

// GetSandbox returns the record of the sandbox with that id or name.
func (c *Client) GetSandbox(ctx context.Context, id string) (wire.Sandbox, error) {
	var rec wire.Sandbox
	return rec, c.call(ctx, "GET", sbPath(id), nil, &rec)
}

// ListSandboxes returns every sandbox's record, oldest first (following the list's pages).
func (c *Client) ListSandboxes(ctx context.Context) ([]wire.Sandbox, error) {
	return all[wire.Sandbox](ctx, c, "/v1/sandboxes", nil)
}

// SandboxesPage returns one page of the sandboxes' records, oldest first.
func (c *Client) SandboxesPage(ctx context.Context, q PageQuery) (wire.Page[wire.Sandbox], error) {
	return page[wire.Sandbox](ctx, c, "/v1/sandboxes", nil, q)
}

// RemoveSandbox destroys a sandbox; its checkpoints stay.
func (c *Client) RemoveSandbox(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", sbPath(id), nil, nil)
}

// stream sends body and copies the NDJSON answer's output to stdout and stderr (either may be
// nil) until the final event, which it returns. An error event becomes an *Error.
func (c *Client) stream(ctx context.Context, path string, body io.Reader, ctype string, stdout, stderr io.Writer) (wire.StreamEvent, error) {
	resp, err := c.do(ctx, "POST", path, body, ctype)
	if err != nil {
		return wire.StreamEvent{}, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev wire.StreamEvent
		if err := dec.Decode(&ev); err != nil {
			return wire.StreamEvent{}, fmt.Errorf("reading the daemon's answer to %s: %w", path, err)
		}
		var w io.Writer
		switch {
		case ev.Error != nil:
			return wire.StreamEvent{}, &Error{Status: wire.StatusOf(ev.Error.Code), ErrorBody: *ev.Error}
		case ev.Exit != nil || ev.Result != nil:
			return ev, nil
		case ev.Stream == "stdout":
			w = stdout
		case ev.Stream == "stderr":
			w = stderr
		}
		if w != nil {
			if _, err := w.Write(ev.Data); err != nil {
				return wire.StreamEvent{}, fmt.Errorf("writing %s output: %w", ev.Stream, err)
			}
		}
	}
}

// Exec runs a command in the sandbox, streaming its output to stdout and stderr (either may
// be nil), and returns its exit status. A missing program exits 127 and one that cannot be
// executed 126, as in a shell, saying why on stderr; a missing cwd is an *Error (IsNotFound).
// req.Stdin, if any, travels in the JSON and is bounded by
// wire.MaxSandboxJSONBytes; ExecStream streams it.
func (c *Client) Exec(ctx context.Context, id string, req wire.ExecBody, stdout, stderr io.Writer) (wire.ExitStatus, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return wire.ExitStatus{}, fmt.Errorf("encoding request: %w", err)
	}
	return c.exec(ctx, id, bytes.NewReader(b), "application/json", stdout, stderr)
}

// ExecStream is Exec with the command's stdin streamed from stdin: the command starts at once,
// reads what stdin yields as it comes, and sees EOF when stdin does (a read error other than
// EOF abandons the call and kills the command). req.Stdin must be empty. ExecStream never
// closes stdin. When the command exits before stdin's EOF, ExecStream returns without waiting
// for it: one Read of stdin may still be in flight then, and what it returns is dropped.
func (c *Client) ExecStream(ctx context.Context, id string, req wire.ExecBody, stdin io.Reader, stdout, stderr io.Writer) (wire.ExitStatus, error) {
	if req.Stdin != nil {
		return wire.ExitStatus{}, errors.New("exec: stdin given twice (in the body and streamed)")
	}
	req.StdinStream = true
	b, err := json.Marshal(req)
	if err != nil {
		return wire.ExitStatus{}, fmt.Errorf("encoding request: %w", err)
	}
	// MultiReader hides stdin's Close from the transport, which closes request bodies.
	body := io.MultiReader(bytes.NewReader(append(b, '\n')), stdin)
	return c.exec(ctx, id, body, "application/octet-stream", stdout, stderr)
}

func (c *Client) exec(ctx context.Context, id string, body io.Reader, ctype string, stdout, stderr io.Writer) (wire.ExitStatus, error) {
	ev, err := c.stream(ctx, sbPath(id, "exec"), body, ctype, stdout, stderr)
	if err != nil {
		return wire.ExitStatus{}, err
	}
	if ev.Exit == nil {
		return wire.ExitStatus{}, errors.New("exec answer ended without an exit status")
	}
	return *ev.Exit, nil
}

// RunCode runs Python in the sandbox's persistent interpreter, streaming what it prints. A
// Python exception is a result with OK false, not an error.
func (c *Client) RunCode(ctx context.Context, id string, req wire.CodeBody, stdout, stderr io.Writer) (wire.CodeResult, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return wire.CodeResult{}, fmt.Errorf("encoding request: %w", err)
	}
	ev, err := c.stream(ctx, sbPath(id, "run-code"), bytes.NewReader(b), "application/json", stdout, stderr)
	if err != nil {
		return wire.CodeResult{}, err
	}
	if ev.Result == nil {
		return wire.CodeResult{}, errors.New("run-code answer ended without a result")
	}
	return *ev.Result, nil
}

// PutFile writes r to the absolute path inside the sandbox with permission bits mode,
// creating parent directories; the file appears whole or not at all.
func (c *Client) PutFile(ctx context.Context, id, path string, mode uint32, r io.Reader) error {
	q := url.Values{"path": {path}, "mode": {strconv.FormatUint(uint64(mode), 8)}}
	return c.callBody(ctx, "PUT", sbPath(id, "files")+"?"+q.Encode(), r, "application/octet-stream", nil)
}

// GetFile copies the file at path inside the sandbox to w.
func (c *Client) GetFile(ctx context.Context, id, path string, w io.Writer) error {
	resp, err := c.do(ctx, "GET", sbPath(id, "files")+"?"+url.Values{"path": {path}}.Encode(), nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("copying %s: %w", path, err)
	}
	return nil
}

// Listing is one directory's listing: at most wire.MaxListEntries entries in name order, and
// the directory's count.
type Listing struct {
	Entries []wire.FileInfo
	Total   int // more than len(Entries) when the daemon capped the listing
}

// ListFiles lists the directory at path inside the sandbox.
func (c *Client) ListFiles(ctx context.Context, id, path string) (Listing, error) {
	var out Listing
	resp, err := c.do(ctx, "GET", sbPath(id, "files", "list")+"?"+url.Values{"path": {path}}.Encode(), nil, "")
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&out.Entries); err != nil {
		return out, fmt.Errorf("decoding listing: %w", err)
	}
	out.Total = len(out.Entries)
	if n, err := strconv.Atoi(resp.Header.Get(wire.EntriesTotalHeader)); err == nil && n > out.Total {
		out.Total = n
	}
	return out, nil
}

// Checkpoint saves an immutable image of the running sandbox, which keeps running. tag may be
// empty; a tag can stand for the checkpoint's id (the newest with that tag).
func (c *Client) Checkpoint(ctx context.Context, id, tag string) (wire.Checkpoint, error) {
	var cp wire.Checkpoint
	return cp, c.call(ctx, "POST", sbPath(id, "checkpoint"), wire.CheckpointBody{Tag: tag}, &cp)
}

// Checkpoints lists checkpoints, oldest first: every one when sandboxID is empty, else those
// taken of that sandbox (a removed sandbox's id still lists its checkpoints). An unknown
// sandbox is an error (IsNotFound), not an empty list. It follows the list's pages.
func (c *Client) Checkpoints(ctx context.Context, sandboxID string) ([]wire.Checkpoint, error) {
	return all[wire.Checkpoint](ctx, c, checkpointsPath(sandboxID), nil)
}

// CheckpointsPage returns one page of Checkpoints(sandboxID), oldest first.
func (c *Client) CheckpointsPage(ctx context.Context, sandboxID string, q PageQuery) (wire.Page[wire.Checkpoint], error) {
	return page[wire.Checkpoint](ctx, c, checkpointsPath(sandboxID), nil, q)
}

// checkpointsPath is the list of the checkpoints of sandboxID (all when "").
func checkpointsPath(sandboxID string) string {
	if sandboxID == "" {
		return "/v1/checkpoints"
	}
	return sbPath(sandboxID, "checkpoints")
}

// GetCheckpoint returns the checkpoint with that id or tag.
func (c *Client) GetCheckpoint(ctx context.Context, checkpoint string) (wire.Checkpoint, error) {
	var cp wire.Checkpoint
	return cp, c.call(ctx, "GET", "/v1/checkpoints/"+url.PathEscape(checkpoint), nil, &cp)
}

// RemoveCheckpoint deletes a checkpoint's image and record; refused (IsConflict) while a
// sandbox was restored from it or another checkpoint descends from it.
func (c *Client) RemoveCheckpoint(ctx context.Context, checkpoint string) error {
	return c.call(ctx, "DELETE", "/v1/checkpoints/"+url.PathEscape(checkpoint), nil, nil)
}

// Fork restores n resealed children of sandbox id (from checkpoint from, or a new one). It
// returns the answer, with every child's outcome, and nil when at least one child runs; when
// every child failed, the answer and an *Error. progress, when not nil, is called (from this
// goroutine) as the daemon reports each child ready or failed. Errors before any child is
// attempted are *Error (400 for a bad n, 404 for an unknown sandbox or checkpoint), or
// *Unreachable when no daemon answers.
func (c *Client) Fork(ctx context.Context, id string, n int, from string, progress func(wire.ForkProgress)) (wire.ForkAnswer, error) {
	return c.ForkWith(ctx, id, wire.ForkBody{N: n, From: from}, progress)
}

// ForkWith is Fork with the whole request body: body.Names names the children (exactly
// body.N distinct names; 400 (IsBadRequest) naming names[i] for a bad one, 409 (IsConflict)
// naming one in use, nothing made). A caller that names the children finds them again by
// name (GetSandbox) when the answer is lost.
func (c *Client) ForkWith(ctx context.Context, id string, body wire.ForkBody, progress func(wire.ForkProgress)) (wire.ForkAnswer, error) {
	var ans wire.ForkAnswer
	b, err := json.Marshal(body)
	if err != nil {
		return ans, fmt.Errorf("encoding request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, "POST", c.base+sbPath(id, "fork"), bytes.NewReader(b))
	if err != nil {
		return ans, fmt.Errorf("making fork request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if progress != nil {
		req.Header.Set("Accept", wire.ForkStreamType)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ans, ctx.Err()
		}
		return ans, c.unreachable(err)
	}
	defer resp.Body.Close()
	if err := checkVersion(resp); err != nil {
		return ans, err
	}
	status := resp.StatusCode
	if resp.Header.Get("Content-Type") == wire.ForkStreamType {
		if ans, status, err = readForkStream(resp.Body, progress); err != nil {
			return ans, err
		}
	} else {
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return ans, fmt.Errorf("reading fork answer: %w", err)
		}
		if err := json.Unmarshal(raw, &ans); err != nil {
			return ans, decodeError(resp.StatusCode, raw)
		}
	}
	if status >= 300 {
		eb := wire.ErrorBody{Code: wire.CodeHTTP, Message: fmt.Sprintf("HTTP %d", status)}
		if ans.Error != nil {
			eb = *ans.Error
		}
		return ans, &Error{Status: status, ErrorBody: eb}
	}
	return ans, nil
}

// readForkStream reads ForkEvents, calling progress for each progress line, up to the answer.
func readForkStream(r io.Reader, progress func(wire.ForkProgress)) (wire.ForkAnswer, int, error) {
	dec := json.NewDecoder(r)
	for {
		var ev wire.ForkEvent
		if err := dec.Decode(&ev); err != nil {
			return wire.ForkAnswer{}, 0, fmt.Errorf("reading fork progress: the stream ended before the answer: %w", err)
		}
		if ev.Progress != nil && progress != nil {
			progress(*ev.Progress)
		}
		if ev.Answer != nil {
			return *ev.Answer, ev.Status, nil
		}
	}
}

// Rollback replaces the sandbox's running copy with a restore of the checkpoint, keeping its
// id, and returns the record (with its new generation). On error the sandbox runs on as it was.
func (c *Client) Rollback(ctx context.Context, id, checkpoint string) (wire.Sandbox, error) {
	var rec wire.Sandbox
	return rec, c.call(ctx, "POST", sbPath(id, "rollback"), wire.RollbackBody{To: checkpoint}, &rec)
}

// Services returns the live state of the sandbox's declared services, or an *Error (404 for
// an unknown sandbox, 409 for a dead one).
func (c *Client) Services(ctx context.Context, id string) ([]wire.ServiceStatus, error) {
	var st []wire.ServiceStatus
	return st, c.call(ctx, "GET", sbPath(id, "services"), nil, &st)
}

// Port publishes TCP port of sandbox id on the daemon host's loopback and returns where.
func (c *Client) Port(ctx context.Context, id string, port int) (wire.PortBody, error) {
	var p wire.PortBody
	return p, c.call(ctx, "POST", sbPath(id, "ports", strconv.Itoa(port)), nil, &p)
}

// Unpublish closes a port Port published (its address stops answering; its connections
// end), freeing its place under the daemon's bound of published ports per sandbox (32).
// IsNotFound when the port is not published.
func (c *Client) Unpublish(ctx context.Context, id string, port int) error {
	return c.call(ctx, "DELETE", sbPath(id, "ports", strconv.Itoa(port)), nil, nil)
}

// Generation returns the sandbox's current generation token (IsConflict while it does not run).
func (c *Client) Generation(ctx context.Context, id string) (wire.GenerationBody, error) {
	var g wire.GenerationBody
	return g, c.call(ctx, "GET", sbPath(id, "generation"), nil, &g)
}

// Pause checkpoints the sandbox (tag "pause") and stops it: it holds no CPU or memory until
// ResumeSandbox. It returns the record (state "paused"), or an *Error (409 when it is not
// running).
func (c *Client) Pause(ctx context.Context, id string) (wire.Sandbox, error) {
	var rec wire.Sandbox
	return rec, c.call(ctx, "POST", sbPath(id, "pause"), nil, &rec)
}

// ResumeSandbox restores a paused sandbox and reseals it: the same id, a new generation.
// timeoutMS, when positive, replaces its timeout (counted from now).
func (c *Client) ResumeSandbox(ctx context.Context, id string, timeoutMS int64) (wire.Sandbox, error) {
	var rec wire.Sandbox
	return rec, c.call(ctx, "POST", sbPath(id, "resume"), wire.ResumeBody{TimeoutMS: timeoutMS}, &rec)
}

// SetTimeout gives a running sandbox a new timeout counted from now (0: none); onTimeout
// "kill" or "pause", or "" to keep its own.
func (c *Client) SetTimeout(ctx context.Context, id string, timeoutMS int64, onTimeout string) (wire.Sandbox, error) {
	var rec wire.Sandbox
	return rec, c.call(ctx, "POST", sbPath(id, "timeout"), wire.TimeoutBody{TimeoutMS: timeoutMS, OnTimeout: onTimeout}, &rec)
}

// Restore makes a new sandbox from a checkpoint (an id or tag), which may have outlived its
// sandbox; the copy is resealed as a fork child is.
func (c *Client) Restore(ctx context.Context, checkpoint string, opts wire.RestoreBody) (wire.Sandbox, error) {
	var rec wire.Sandbox
	return rec, c.call(ctx, "POST", "/v1/checkpoints/"+url.PathEscape(checkpoint)+"/restore", opts, &rec)
}

// Templates lists the templates sandboxes are created from by name (CreateOptions.Template).
func (c *Client) Templates(ctx context.Context) ([]wire.Template, error) {
	return all[wire.Template](ctx, c, "/v1/templates", nil)
}

// SandboxAccessToken returns the access token of sandbox id (an id or a name): a bearer token
// that reaches only that sandbox's record, exec, run-code, files, generation, services and
// ports, and is refused (IsPermissionDenied) everywhere else; a client made with it
// (NewTCPClient, NewTLSClient, or ZYGO_TOKEN for the CLI) just works for those calls. The
// same sandbox always has the same token; it dies with the sandbox, and a fork of the sandbox
// has its own. It needs one of the daemon's tokens (or the unix socket).
func (c *Client) SandboxAccessToken(ctx context.Context, id string) (wire.SandboxAccessToken, error) {
	var at wire.SandboxAccessToken
	return at, c.call(ctx, "POST", sbPath(id, "access-token"), nil, &at)
}
