// Package zygo is the Go client of a Zygo daemon (`zygo serve`): functions (deploy, invoke,
// logs, list, remove, secrets) and sandboxes (long-lived gVisor sandboxes that can be
// checkpointed, forked N ways and rolled back, each copy resealed before it is handed out).
// It talks to the daemon's HTTP API (package wire) over its unix socket, or TCP with the
// daemon's bearer token, and depends only on the standard library; the zygo CLI uses it.
//
//	c := zygo.NewClient(zygo.DefaultSocket())
//	res, err := c.DeployDir(ctx, "examples/hello")
//	out, err := c.Invoke(ctx, "hello", []byte(`{"name": "x"}`))
//	sb, err := c.Create(ctx, zygo.CreateOptions{Name: "agent"})
//	code, err := sb.RunCode(ctx, "x = 41")
//	cp, err := sb.Checkpoint(ctx, "base")
//	fork, err := sb.Fork(ctx, 3, cp.ID)  // three independent copies of the running sandbox
//
// Sandboxes have two levels: a *Sandbox (from Create, Get, List or Sandbox) is a handle with
// buffered results, and the Client's methods that take a sandbox id (Exec, ExecStream,
// RunCode, Fork, ...) are the calls underneath, streaming to the writers given. examples/sdk-go
// is a complete program.
//
// Errors the daemon answers are *Error values carrying the HTTP status and the error body
// (its wire.Code); test them with IsNotFound and friends. A daemon that does not answer is an
// *Unreachable. Every method takes a context; cancelling it abandons the call (an exec or
// run-code in flight is killed).
package zygo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// Client talks to one Zygo daemon. Safe for concurrent use.
type Client struct {
	base   string
	hc     *http.Client
	socket string // the unix socket's path; "" for a TCP client
	addr   string // the TCP address; "" for a unix-socket client
}

// NewClient returns a client for the daemon listening on the unix socket at socketPath.
func NewClient(socketPath string) *Client {
	return &Client{base: "http://zygo", hc: wire.UnixHTTPClient(socketPath), socket: socketPath}
}

// NewTCPClient returns a client for a daemon started with `zygo serve --listen addr`. That
// listener is open to every local user, so each call must carry the daemon's token: the
// contents of api.token in its state directory (mode 0600), sent as "Authorization: Bearer
// token". With token "" none is sent, and the daemon answers 401 (IsUnauthenticated).
func NewTCPClient(addr, token string) *Client {
	return &Client{base: "http://" + addr, hc: wire.TCPHTTPClient(token), addr: addr}
}

// SocketName is the name of the daemon's unix socket inside its state directory.
const SocketName = "zygo.sock"

// DefaultStateDir returns the state directory a daemon uses when given none, and so where
// clients look for it ($ZYGO_STATE_DIR aside): /var/lib/zygo for root, else
// $XDG_STATE_HOME/zygo, else ~/.local/state/zygo (the XDG base directory spec). Where the
// home directory is unknown it returns the relative path .local/state/zygo.
func DefaultStateDir() string { return defaultStateDir(os.Geteuid()) } // euid -1 on Windows

func defaultStateDir(euid int) string {
	if euid == 0 {
		return "/var/lib/zygo"
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "zygo")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "zygo")
}

// DefaultSocket returns where the CLI looks for the daemon: $ZYGO_STATE_DIR/zygo.sock, else
// zygo.sock in DefaultStateDir().
func DefaultSocket() string { return defaultSocket(os.Geteuid()) }

func defaultSocket(euid int) string {
	if d := os.Getenv("ZYGO_STATE_DIR"); d != "" {
		return filepath.Join(d, SocketName)
	}
	return filepath.Join(defaultStateDir(euid), SocketName)
}

// Error is a call the daemon refused or failed: the HTTP status and the error body.
type Error struct {
	Status int
	wire.ErrorBody
}

// Error returns the daemon's message as it sent it (ErrorBody.Text: `function "x" not
// found`), and the handler's traceback after it when there is one.
func (e *Error) Error() string {
	msg := e.Text()
	if e.Traceback != "" {
		return msg + "\n" + e.Traceback
	}
	return msg
}

// Unreachable is a transport failure: no daemon answered at Addr (a TCP client) or on
// Socket (a unix-socket client).
type Unreachable struct {
	Err    error
	Socket string // the unix socket's path; "" for a TCP client
	Addr   string // the TCP address; "" for a unix-socket client
}

// Error says who did not answer and what to check: the address and the daemon's --listen
// for TCP, the state directory for the unix socket.
func (e *Unreachable) Error() string {
	if e.Addr != "" {
		return fmt.Sprintf("no Zygo daemon answered at %s (is `zygo serve --listen %s` running, and is the address right?): %v",
			e.Addr, e.Addr, e.Err)
	}
	return fmt.Sprintf("no Zygo daemon answered (is `zygo serve` running with the same --state-dir?): %v", e.Err)
}

// unreachable returns the *Unreachable of a transport failure err on c.
func (c *Client) unreachable(err error) *Unreachable {
	return &Unreachable{Err: err, Socket: c.socket, Addr: c.addr}
}

func (e *Unreachable) Unwrap() error { return e.Err }

// VersionMismatch is an answer from a daemon that speaks another version of the API
// (wire.APIVersionHeader): the client does not read it, since its bodies may mean something
// else. An answer without the header (a daemon older than the header) is read as version 1.
type VersionMismatch struct {
	Daemon string // the version the daemon sent, as it sent it
}

// Error says both versions and what to do.
func (e *VersionMismatch) Error() string {
	return fmt.Sprintf("the daemon speaks API version %s; this client speaks %d (use a client of the daemon's release)",
		e.Daemon, wire.APIVersion)
}

// checkVersion returns a *VersionMismatch when resp comes from a daemon of another API version.
func checkVersion(resp *http.Response) error {
	v := resp.Header.Get(wire.APIVersionHeader)
	if v == "" || v == strconv.Itoa(wire.APIVersion) {
		return nil
	}
	return &VersionMismatch{Daemon: v}
}

func hasCode(err error, codes ...wire.Code) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	for _, c := range codes {
		if e.Code == c {
			return true
		}
	}
	return false
}

// IsNotFound reports whether err says the function, sandbox, checkpoint, file or binary does
// not exist.
func IsNotFound(err error) bool { return hasCode(err, wire.CodeNotFound) }

// IsBadRequest reports whether err says the request was malformed or out of range (a fork N
// beyond the bound, for one); the message names the field.
func IsBadRequest(err error) bool { return hasCode(err, wire.CodeBadRequest) }

// IsConflict reports whether err says the object is in a state that forbids the call (a
// checkpoint still referenced, a sandbox that is not running) or the name is taken.
func IsConflict(err error) bool { return hasCode(err, wire.CodeFailedPrecondition, wire.CodeExists) }

// IsUnauthenticated reports whether err says the call lacked the daemon's token, or carried
// a wrong one (TCP only; see NewTCPClient).
func IsUnauthenticated(err error) bool { return hasCode(err, wire.CodeUnauthenticated) }

// IsUnavailable reports whether err says sandboxes (or the engine, or a guest) are not
// available on this daemon; the message says why.
func IsUnavailable(err error) bool { return hasCode(err, wire.CodeUnavailable) }

// do sends one request; a non-2xx answer becomes an *Error, a transport failure an
// *Unreachable (ctx's error when ctx ended). The caller closes the body.
func (c *Client) do(ctx context.Context, method, path string, body io.Reader, ctype string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("making request %s %s: %w", method, path, err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	return c.send(ctx, req)
}

// send is do with the request made.
func (c *Client) send(ctx context.Context, req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, c.unreachable(err)
	}
	if err := checkVersion(resp); err != nil {
		resp.Body.Close()
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return resp, nil
}

// readError returns the *Error of a non-2xx answer; one without an error body gets
// wire.CodeHTTP and the start of what the body held.
func readError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return decodeError(resp.StatusCode, raw)
}

func decodeError(status int, raw []byte) *Error {
	var eb wire.ErrorAnswer
	if json.Unmarshal(raw, &eb) != nil || eb.Error.Code == "" {
		return &Error{Status: status, ErrorBody: wire.ErrorBody{Code: wire.CodeHTTP,
			Message: fmt.Sprintf("HTTP %d: %s", status, bytes.TrimSpace(raw))}}
	}
	return &Error{Status: status, ErrorBody: eb.Error}
}

// call sends in (JSON, when not nil) and decodes the answer into out (when not nil).
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	ctype := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encoding request: %w", err)
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	return c.callBody(ctx, method, path, body, ctype, out)
}

// callBody is call with the request body given.
func (c *Client) callBody(ctx context.Context, method, path string, body io.Reader, ctype string, out any) error {
	resp, err := c.do(ctx, method, path, body, ctype)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decoding the answer to %s %s: %w", method, path, err)
	}
	return nil
}

// PageQuery selects one page of a list (wire.Page): at most Limit items (1..wire.MaxPageLimit;
// 0: the daemon's default, wire.DefaultPageLimit) after Cursor, a previous page's NextCursor
// ("": the first page).
type PageQuery struct {
	Limit  int
	Cursor string
}

// with returns path with q's parameters added to the query v (which may be nil).
func (q PageQuery) with(path string, v url.Values) string {
	if v == nil {
		v = url.Values{}
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

// page returns one page of the list at path (with the query v, which may be nil).
func page[T any](ctx context.Context, c *Client, path string, v url.Values, q PageQuery) (wire.Page[T], error) {
	var p wire.Page[T]
	return p, c.call(ctx, "GET", q.with(path, v), nil, &p)
}

// all returns every item of the list at path, following the cursors in pages of
// wire.MaxPageLimit. An item added while it pages is listed when it sorts after the page
// being read.
func all[T any](ctx context.Context, c *Client, path string, v url.Values) ([]T, error) {
	out := []T{}
	q := PageQuery{Limit: wire.MaxPageLimit}
	for {
		p, err := page[T](ctx, c, path, maps.Clone(v), q)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Items...)
		if p.NextCursor == "" {
			return out, nil
		}
		q.Cursor = p.NextCursor
	}
}

// Status returns the daemon's status.
func (c *Client) Status(ctx context.Context) (wire.StatusBody, error) {
	var s wire.StatusBody
	return s, c.call(ctx, "GET", "/v1/status", nil, &s)
}
