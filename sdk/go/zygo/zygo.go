// Package zygo is the Go client of a Zygo daemon (`zygo serve`): functions (deploy, invoke,
// logs, list, remove, secrets) and sandboxes (long-lived gVisor sandboxes that can be
// checkpointed, forked N ways and rolled back, each copy resealed before it is handed out).
// It talks to the daemon's HTTP API (package wire) over its unix socket (NewClient), or TCP
// with one of the daemon's bearer tokens: plain HTTP on loopback (NewTCPClient) or TLS to a
// daemon on another machine (NewTLSClient, LoadCA). It depends only on the standard library
// and builds for Linux, macOS and Windows; the zygo CLI uses it.
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
	"crypto/tls"
	"crypto/x509"
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
	"sync"
	"time"

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

// NewTLSClient returns a client for a daemon serving TLS on addr (host:port; `zygo serve
// --listen addr --tls-cert F --tls-key F`), typically another machine's. Each call carries
// token (one of `zygo token create`, or api.token) as "Authorization: Bearer token". tc holds
// what to trust: RootCAs (nil: the system's roots), ServerName (empty: addr's host), a client
// certificate if wanted; nil is the default configuration. The client keeps its own copy of
// tc. A certificate that does not verify is an *Unreachable whose Err says why.
func NewTLSClient(addr, token string, tc *tls.Config) *Client {
	return &Client{base: "https://" + addr, hc: wire.TLSHTTPClient(token, tc), addr: addr}
}

// LoadCA returns a pool holding the PEM certificates of the file at path (a CA, or a
// daemon's self-signed certificate), for tls.Config.RootCAs. Errors: the file cannot be read,
// or holds no PEM certificate.
func LoadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("the CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// SocketName is the name of the daemon's unix socket inside its state directory.
const SocketName = "zygo.sock"

// TokenName is the name of the file inside the daemon's state directory holding the token
// named "default" (64 hex digits, mode 0600), made on the daemon's first start with --listen.
const TokenName = "api.token"

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
	// RetryAfter is the answer's Retry-After (a 429 of a function whose queue is full); 0
	// when it had none.
	RetryAfter time.Duration
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

// BodyError is a call that failed because its request body could not be read: a local
// failure (the file given to PutFile or Deploy), not the daemon's.
type BodyError struct{ Err error }

func (e *BodyError) Error() string { return "reading the request body: " + e.Err.Error() }
func (e *BodyError) Unwrap() error { return e.Err }

// bodyReader keeps the first error of the request body's Read that is not io.EOF.
type bodyReader struct {
	io.ReadCloser
	mu  sync.Mutex // guards err: Read runs on the transport's goroutine
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

// readErr returns the first error of Read; nil for a nil b.
func (b *bodyReader) readErr() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

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

// IsPermissionDenied reports whether err says the call is refused for who makes it: a sandbox
// access token used beyond its sandbox, a token route over TCP, a protected path in a
// sandbox (403).
func IsPermissionDenied(err error) bool { return hasCode(err, wire.CodePermissionDenied) }

// IsTooManyRequests reports whether err says the function is at its concurrency with its
// queue full (429); Error.RetryAfter says when to retry.
func IsTooManyRequests(err error) bool { return hasCode(err, wire.CodeTooManyRequests) }

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

// send is do with the request made. An error reading the request's body (a local file that
// vanished, a directory given as a file) is returned as the caller's own, wrapped in
// *BodyError, never as an *Unreachable: the daemon may well have answered.
func (c *Client) send(ctx context.Context, req *http.Request) (*http.Response, error) {
	var body *bodyReader
	if req.Body != nil && req.Body != http.NoBody {
		body = &bodyReader{ReadCloser: req.Body}
		req.Body = body
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if berr := body.readErr(); berr != nil {
			return nil, &BodyError{Err: berr}
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
	e := decodeError(resp.StatusCode, raw)
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
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
