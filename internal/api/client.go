package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/secret"
)

// Client talks to a daemon over its unix socket or a TCP address.
type Client struct {
	base string
	hc   *http.Client
}

// NewUnixClient returns a client for the daemon listening on socketPath.
func NewUnixClient(socketPath string) *Client {
	return &Client{base: "http://zygo", hc: UnixHTTPClient(socketPath)}
}

// NewTCPClient returns a client for a daemon serving loopback TCP at
// host:port (`zygo serve --listen`). Every request carries token as
// "Authorization: Bearer token", as that listener requires (see
// RequireToken); with token "" none is sent and the daemon answers 401.
func NewTCPClient(addr, token string) *Client {
	return &Client{base: "http://" + addr, hc: TCPHTTPClient(token)}
}

// UnixHTTPClient returns an http.Client whose every connection dials the
// daemon's unix socket at socketPath (the URL's host is ignored). The Go
// SDK uses it too. Each connection is checked (checkPeer) before any byte
// is sent: its peer must run as root or as this process's euid, so a socket
// another user swapped in (in a state dir they can change) receives no
// call, no secret.
func UnixHTTPClient(socketPath string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", socketPath)
			if err != nil {
				return nil, err
			}
			if err := checkPeer(c, socketPath, os.Geteuid()); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		},
		MaxIdleConnsPerHost: 64,
	}}
}

// TCPHTTPClient returns an http.Client for the daemon's loopback TCP
// listener that sends token as "Authorization: Bearer token" on every
// request (none when token is ""). The Go SDK uses it too.
func TCPHTTPClient(token string) *http.Client {
	var rt http.RoundTripper = &http.Transport{MaxIdleConnsPerHost: 64}
	if token != "" {
		rt = &bearerTransport{token: token, next: rt}
	}
	return &http.Client{Transport: rt}
}

// Error is a failed API call: the HTTP status and the server's error body.
type Error struct {
	Status int
	Body   ErrorBody
}

func (e *Error) Error() string {
	msg := e.Body.Message
	if e.Body.Traceback != "" {
		msg += "\n" + e.Body.Traceback
	}
	return msg
}

// Unreachable wraps a transport failure: no daemon answered.
type Unreachable struct{ Err error }

func (e *Unreachable) Error() string {
	return fmt.Sprintf("no Zygo daemon answered (is `zygo serve` running with the same --state-dir?): %v", e.Err)
}

func (e *Unreachable) Unwrap() error { return e.Err }

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
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &Unreachable{err}
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var eb struct {
			Error ErrorBody `json:"error"`
		}
		if json.Unmarshal(b, &eb) != nil || eb.Error.Code == "" {
			eb.Error = ErrorBody{Code: "http", Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))}
		}
		return nil, &Error{Status: resp.StatusCode, Body: eb.Error}
	}
	return resp, nil
}

func (c *Client) getJSON(ctx context.Context, method, path string, body io.Reader, ctype string, out any) error {
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

// Status returns the daemon's status.
func (c *Client) Status(ctx context.Context) (StatusBody, error) {
	var s StatusBody
	return s, c.getJSON(ctx, "GET", "/v1/status", nil, "", &s)
}

// Deploy uploads a function directory (packed with function.PackDir).
func (c *Client) Deploy(ctx context.Context, dir string) (*function.DeployResult, error) {
	var buf bytes.Buffer
	if err := function.PackDir(dir, &buf); err != nil {
		return nil, err
	}
	var res function.DeployResult
	return &res, c.getJSON(ctx, "POST", "/v1/functions", &buf, "application/gzip", &res)
}

// List returns every function.
func (c *Client) List(ctx context.Context) ([]function.Status, error) {
	var out []function.Status
	return out, c.getJSON(ctx, "GET", "/v1/functions", nil, "", &out)
}

// Remove deletes a function.
func (c *Client) Remove(ctx context.Context, name string) error {
	return c.getJSON(ctx, "DELETE", "/v1/functions/"+url.PathEscape(name), nil, "", nil)
}

// InvokeResult is the handler's JSON value and the request's metadata.
type InvokeResult struct {
	Value     json.RawMessage
	RequestID string
	Child     string        // where the request's process came from (X-Zygo-Child)
	Elapsed   time.Duration // as measured by the client, round trip
}

// Invoke runs the function with event and returns its result. A failed
// request is an *Error whose Body carries the handler's error.
func (c *Client) Invoke(ctx context.Context, name string, event []byte) (*InvokeResult, error) {
	t0 := time.Now()
	resp, err := c.do(ctx, "POST", "/v1/functions/"+url.PathEscape(name)+"/invoke", bytes.NewReader(event), "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &InvokeResult{Value: bytes.TrimSpace(b), RequestID: resp.Header.Get("X-Zygo-Request-Id"),
		Child: resp.Header.Get("X-Zygo-Child"), Elapsed: time.Since(t0)}, nil
}

// Logs returns log lines after id `after`, optionally of one request.
func (c *Client) Logs(ctx context.Context, name, requestID string, after int64) (*LogsBody, error) {
	q := url.Values{}
	if requestID != "" {
		q.Set("request", requestID)
	}
	q.Set("after", strconv.FormatInt(after, 10))
	var out LogsBody
	return &out, c.getJSON(ctx, "GET", "/v1/functions/"+url.PathEscape(name)+"/logs?"+q.Encode(), nil, "", &out)
}

// IsUnauthenticated reports whether err is an API 401: a TCP call without
// the daemon's token, or with a wrong one.
func IsUnauthenticated(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusUnauthorized
}

// IsNotFound reports whether err is an API 404.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// SetSecret stores a secret's value.
func (c *Client) SetSecret(ctx context.Context, name string, value []byte) error {
	return c.getJSON(ctx, "PUT", "/v1/secrets/"+url.PathEscape(name), bytes.NewReader(value), "application/octet-stream", nil)
}

// ListSecrets returns the names and update times of every secret.
func (c *Client) ListSecrets(ctx context.Context) ([]secret.Meta, error) {
	var out []secret.Meta
	return out, c.getJSON(ctx, "GET", "/v1/secrets", nil, "", &out)
}

// RemoveSecret deletes a secret.
func (c *Client) RemoveSecret(ctx context.Context, name string) error {
	return c.getJSON(ctx, "DELETE", "/v1/secrets/"+url.PathEscape(name), nil, "", nil)
}
