package zygo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

func fnPath(name string, rest ...string) string {
	p := "/v1/functions/" + url.PathEscape(name)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// Deploy uploads a bundle (the gzip'd tar of a function directory, see PackDir; at most
// wire.MaxBundleBytes) and returns once the new version serves. A version that fails to
// import is an *Error with code wire.CodeImportFailed and the traceback; the previous version
// keeps serving.
func (c *Client) Deploy(ctx context.Context, bundle io.Reader) (wire.DeployResult, error) {
	var res wire.DeployResult
	return res, c.callBody(ctx, "POST", "/v1/functions", bundle, "application/gzip", &res)
}

// DeployDir packs the function directory dir (it holds zygo.toml) with PackDir and deploys it.
func (c *Client) DeployDir(ctx context.Context, dir string) (wire.DeployResult, error) {
	var buf bytes.Buffer
	if err := PackDir(dir, &buf); err != nil {
		return wire.DeployResult{}, err
	}
	return c.Deploy(ctx, &buf)
}

// Functions returns every deployed function, by name (following the list's pages).
func (c *Client) Functions(ctx context.Context) ([]wire.Function, error) {
	return all[wire.Function](ctx, c, "/v1/functions", nil)
}

// FunctionsPage returns one page of the deployed functions, by name.
func (c *Client) FunctionsPage(ctx context.Context, q PageQuery) (wire.Page[wire.Function], error) {
	return page[wire.Function](ctx, c, "/v1/functions", nil, q)
}

// Function returns one function (IsNotFound when there is none of that name).
func (c *Client) Function(ctx context.Context, name string) (wire.Function, error) {
	var out wire.Function
	return out, c.call(ctx, "GET", fnPath(name), nil, &out)
}

// RemoveFunction deletes a function and its versions.
func (c *Client) RemoveFunction(ctx context.Context, name string) error {
	return c.call(ctx, "DELETE", fnPath(name), nil, nil)
}

// InvokeResult is the handler's JSON value and the request's metadata.
type InvokeResult struct {
	Value     json.RawMessage
	RequestID string        // the id its log lines carry
	Version   string        // the function version that served it
	Child     string        // where its process came from: preforked, forked, spawned or worker
	Elapsed   time.Duration // as measured by the client, round trip
	Phases    []wire.Timing // the daemon's timed steps of the request (Server-Timing), in order
}

// Invoke runs the function with event (JSON; empty means {}) and returns its result. A
// request that failed (the handler raised, a timeout, a crash) is an *Error whose body carries
// the invoke code (wire.CodeHandlerError...), the handler's error and the request id.
func (c *Client) Invoke(ctx context.Context, name string, event []byte) (*InvokeResult, error) {
	t0 := time.Now()
	resp, err := c.do(ctx, "POST", fnPath(name, "invoke"), bytes.NewReader(event), "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the result of %s: %w", name, err)
	}
	return &InvokeResult{Value: bytes.TrimSpace(b), RequestID: resp.Header.Get(wire.RequestIDHeader),
		Version: resp.Header.Get(wire.VersionHeader), Child: resp.Header.Get(wire.ChildHeader),
		Elapsed: time.Since(t0), Phases: wire.ParseServerTiming(resp.Header.Get(wire.ServerTimingHeader))}, nil
}

// LogsQuery selects log lines; the zero value asks for the first page of every request's.
type LogsQuery struct {
	RequestID string    // only this request's lines (its X-Zygo-Request-Id, or the X-Request-Id its caller gave)
	After     int64     // lines after this id (LogsBody.Next of the previous page)
	Limit     int       // at most this many (1..wire.MaxLogsLimit); 0: the daemon's default
	Since     time.Time // when set, only lines stored at or after it
	// FromEnd asks for the newest Tail lines (0..wire.MaxLogsLimit; 0: none) instead of a page
	// after After, and a Next at the function's newest line: where following starts.
	FromEnd bool
	Tail    int
}

// Logs returns a page of a function's log lines, oldest first.
func (c *Client) Logs(ctx context.Context, name string, q LogsQuery) (wire.LogsBody, error) {
	v := url.Values{}
	if q.RequestID != "" {
		v.Set("request", q.RequestID)
	}
	if q.FromEnd {
		v.Set("tail", strconv.Itoa(q.Tail))
	} else {
		v.Set("after", strconv.FormatInt(q.After, 10))
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out wire.LogsBody
	return out, c.call(ctx, "GET", fnPath(name, "logs")+"?"+v.Encode(), nil, &out)
}

// SetSecret stores a secret's value (functions and sandboxes name it; it is never shown).
func (c *Client) SetSecret(ctx context.Context, name string, value []byte) error {
	return c.callBody(ctx, "PUT", "/v1/secrets/"+url.PathEscape(name), bytes.NewReader(value), "application/octet-stream", nil)
}

// SetTenantSecret stores (or replaces) pool tenant's secret name, which a run of that
// tenant receives (PoolRunRequest.Secrets); no function or sandbox can name it.
func (c *Client) SetTenantSecret(ctx context.Context, tenant, name string, value []byte) error {
	return c.callBody(ctx, "PUT", "/v1/secrets/"+url.PathEscape(name)+"?"+url.Values{"tenant": {tenant}}.Encode(),
		bytes.NewReader(value), "application/octet-stream", nil)
}

// RemoveTenantSecret deletes pool tenant's secret name.
func (c *Client) RemoveTenantSecret(ctx context.Context, tenant, name string) error {
	return c.call(ctx, "DELETE", "/v1/secrets/"+url.PathEscape(name)+"?"+url.Values{"tenant": {tenant}}.Encode(), nil, nil)
}

// ListSecrets returns the names and update times of every secret, by name (following the
// list's pages).
func (c *Client) ListSecrets(ctx context.Context) ([]wire.SecretMeta, error) {
	return all[wire.SecretMeta](ctx, c, "/v1/secrets", nil)
}

// SecretsPage returns one page of the secrets' names and update times, by name.
func (c *Client) SecretsPage(ctx context.Context, q PageQuery) (wire.Page[wire.SecretMeta], error) {
	return page[wire.SecretMeta](ctx, c, "/v1/secrets", nil, q)
}

// RemoveSecret deletes a secret; refused (IsConflict) while a function, sandbox or checkpoint
// names it.
func (c *Client) RemoveSecret(ctx context.Context, name string) error {
	return c.call(ctx, "DELETE", "/v1/secrets/"+url.PathEscape(name), nil, nil)
}
