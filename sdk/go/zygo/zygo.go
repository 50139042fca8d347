// Package zygo is the Go SDK for Zygo's sandboxes: long-lived gVisor sandboxes that can be
// checkpointed, forked N ways and rolled back, each copy resealed (new generation, identity and
// tokens) before it is handed out. It talks to a running `zygo serve` over its HTTP API (a
// unix socket, or loopback TCP) and depends only on the standard library.
//
//	c := zygo.NewClient(zygo.DefaultSocket())
//	sb, err := c.Create(ctx, zygo.CreateOptions{Name: "agent"})
//	res, err := sb.RunCode(ctx, "x = 41")
//	cp, err := sb.Checkpoint(ctx, "base")
//	fork, err := sb.Fork(ctx, 3, cp.ID)  // three independent copies of the running sandbox
//
// examples/sdk-go is a complete program. Errors from the daemon are *Error values; test them
// with IsNotFound and friends. Every method takes a context; cancelling it abandons the call
// (an exec or run-code in flight is killed).
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
	"os"
	"path/filepath"
	"time"

	"github.com/zygo-run/zygo/internal/api"
)

// Client talks to one Zygo daemon. Safe for concurrent use.
type Client struct {
	base string
	hc   *http.Client
}

// NewClient returns a client for the daemon listening on the unix socket at socketPath.
func NewClient(socketPath string) *Client {
	return &Client{base: "http://zygo", hc: api.UnixHTTPClient(socketPath)}
}

// NewTCPClient returns a client for a daemon started with `zygo serve --listen addr`. That
// listener is open to every local user, so each call must carry the daemon's token: the
// contents of api.token in its state directory (mode 0600), sent as "Authorization: Bearer
// token". With token "" none is sent, and the daemon answers 401 (IsUnauthenticated).
func NewTCPClient(addr, token string) *Client {
	return &Client{base: "http://" + addr, hc: api.TCPHTTPClient(token)}
}

// DefaultSocket returns where the CLI looks for the daemon: $ZYGO_STATE_DIR/zygo.sock, else
// /var/lib/zygo/zygo.sock.
func DefaultSocket() string {
	if d := os.Getenv("ZYGO_STATE_DIR"); d != "" {
		return filepath.Join(d, "zygo.sock")
	}
	return "/var/lib/zygo/zygo.sock"
}

// Error is a call the daemon refused or failed. Status is the HTTP status; Code is one of
// not_found, bad_request, too_large, exists, failed_precondition, unavailable,
// deadline_exceeded, unauthenticated, internal.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

func hasCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// IsNotFound reports whether err says the sandbox, checkpoint, file or binary does not exist.
func IsNotFound(err error) bool { return hasCode(err, "not_found") }

// IsBadRequest reports whether err says the request was malformed or out of range (a fork N
// beyond the bound, for one).
func IsBadRequest(err error) bool { return hasCode(err, "bad_request") }

// IsConflict reports whether err says the object is in a state that forbids the call (a
// checkpoint still referenced, a sandbox that is not running) or the name is taken.
func IsConflict(err error) bool { return hasCode(err, "failed_precondition") || hasCode(err, "exists") }

// IsUnauthenticated reports whether err says the call lacked the daemon's token, or carried
// a wrong one (TCP only; see NewTCPClient).
func IsUnauthenticated(err error) bool { return hasCode(err, "unauthenticated") }

// IsUnavailable reports whether err says sandboxes (or the engine, or a guest) are not
// available on this daemon; the message says why.
func IsUnavailable(err error) bool { return hasCode(err, "unavailable") }

// do sends one request; a non-2xx answer becomes an *Error. The caller closes the body.
func (c *Client) do(ctx context.Context, method, path string, body io.Reader, ctype string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("zygo daemon unreachable: %w", err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return resp, nil
}

func readError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb struct {
		Error *Error `json:"error"`
	}
	if json.Unmarshal(raw, &eb) != nil || eb.Error == nil {
		return &Error{Status: resp.StatusCode, Code: "http", Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(raw))}
	}
	eb.Error.Status = resp.StatusCode
	return eb.Error
}

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	ctype := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	resp, err := c.do(ctx, method, path, body, ctype)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func sbPath(id string, rest ...string) string {
	p := "/v1/sandboxes/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// Service is a long-lived process a sandbox starts at boot.
type Service struct {
	Name string   `json:"name"`
	Argv []string `json:"argv"`
	Env  []string `json:"env,omitempty"`
	// OnFork is what a fork or rollback does to it: "restart" (a fresh process), "signal"
	// (Signal, default SIGHUP, after the new generation is published) or "keep" (default).
	OnFork string `json:"on_fork,omitempty"`
	Signal int    `json:"signal,omitempty"`
	// Restart is when the sandbox starts it again after its process ended: "on-failure" (the
	// default: a non-zero exit or a signal), "always" or "no"; after 100 ms, doubled for each
	// consecutive restart up to 30 s. Another value is refused at create (IsBadRequest).
	Restart string `json:"restart,omitempty"`
}

// CreateOptions are chosen at create; forks and rollbacks inherit them.
type CreateOptions struct {
	Name      string    `json:"name,omitempty"`       // unique; default the id
	RootfsDir string    `json:"rootfs_dir,omitempty"` // a host directory to use, read-only, as the root
	Services  []Service `json:"services,omitempty"`
	Env       []string  `json:"env,omitempty"` // KEY=VALUE for every exec and service
	// Secrets names secrets set with `zygo secret set NAME`: each is written to
	// /run/secrets/NAME (mode 0400) at create and, with its current value, in every fork child
	// and rollback. An unknown name is an error (IsBadRequest) naming it.
	Secrets []string `json:"secrets,omitempty"`
	// MemoryMiB bounds the sandbox's memory in MiB: its processes and the files written to its
	// in-memory root (/tmp and every other path) together. 0 means the daemon's default,
	// 2048 (or the host's memory if less); below 64 or above the host's memory is an error
	// (IsBadRequest). Past it the kernel kills the largest process inside (exit 137) or the
	// whole sandbox (then State "dead", Error naming the memory limit).
	MemoryMiB int `json:"memory_mib,omitempty"`
	// PIDs bounds the processes and threads alive at once inside, the guest agent's own
	// threads included; past it fork and clone fail with EAGAIN. 0 means the default, 4096;
	// below 32 is an error (IsBadRequest).
	PIDs int `json:"pids,omitempty"`
	// CPUs is a CPU quota in cores (1.5 = one and a half cores); 0 means no quota; below 0.01
	// or above the host's CPU count is an error (IsBadRequest).
	CPUs float64 `json:"cpus,omitempty"`
}

// Sandbox is a sandbox's record at the time it was read, and the handle to act on it.
type Sandbox struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	State        string    `json:"state"` // running, checkpointing, rolling_back, dead (engine died; Error says why), failed, recovering (retry shortly), …
	ParentID     string    `json:"parent_id,omitempty"`
	CheckpointID string    `json:"checkpoint_id,omitempty"`
	Generation   string    `json:"generation"` // 128 bits as 32 hex digits; new on every fork and rollback
	Error        string    `json:"error,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	// Options are the sandbox's create options as in force: its limits with the defaults
	// filled in (a fork child's and a rollback's are those of its checkpoint's sandbox).
	Options CreateOptions `json:"options"`

	c *Client
}

// Create starts a sandbox and returns it once its guest agent answers.
func (c *Client) Create(ctx context.Context, opts CreateOptions) (*Sandbox, error) {
	sb := &Sandbox{c: c}
	return sb, c.call(ctx, "POST", "/v1/sandboxes", opts, sb)
}

// Get returns the sandbox with that id or name.
func (c *Client) Get(ctx context.Context, idOrName string) (*Sandbox, error) {
	sb := &Sandbox{c: c}
	return sb, c.call(ctx, "GET", sbPath(idOrName), nil, sb)
}

// List returns every sandbox, oldest first.
func (c *Client) List(ctx context.Context) ([]*Sandbox, error) {
	var out []*Sandbox
	if err := c.call(ctx, "GET", "/v1/sandboxes", nil, &out); err != nil {
		return nil, err
	}
	for _, sb := range out {
		sb.c = c
	}
	return out, nil
}

// Remove destroys the sandbox. Its checkpoints stay.
func (sb *Sandbox) Remove(ctx context.Context) error {
	return sb.c.call(ctx, "DELETE", sbPath(sb.ID), nil, nil)
}

// CurrentGeneration asks the daemon for the sandbox's generation now (sb.Generation is the one
// it had when sb was read).
func (sb *Sandbox) CurrentGeneration(ctx context.Context) (string, error) {
	var g struct {
		Generation string `json:"generation"`
	}
	err := sb.c.call(ctx, "GET", sbPath(sb.ID, "generation"), nil, &g)
	return g.Generation, err
}
