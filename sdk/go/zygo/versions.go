package zygo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// DeployStream is Deploy with progress: progress (when not nil) is called with each step the
// daemon reports (wire.StepUnpacking ... wire.StepReady; wire.StepUploading first) while the
// new version is stored, imported and warmed up. Cancelling ctx cancels the deploy on the
// daemon: the new version's sandbox is stopped and the previous version keeps serving.
func (c *Client) DeployStream(ctx context.Context, bundle io.Reader, progress func(wire.DeployEvent)) (wire.DeployResult, error) {
	return c.deployStream(ctx, "/v1/functions", bundle, "application/gzip", progress)
}

// DeployDirStream packs the function directory dir with PackDir and deploys it with
// DeployStream.
func (c *Client) DeployDirStream(ctx context.Context, dir string, progress func(wire.DeployEvent)) (wire.DeployResult, error) {
	var buf bytes.Buffer
	if err := PackDir(dir, &buf); err != nil {
		return wire.DeployResult{}, err
	}
	return c.DeployStream(ctx, &buf, progress)
}

// FunctionVersions returns every stored version of function name, the most recently
// deployed first, following the list's pages (IsNotFound when there is no such function).
func (c *Client) FunctionVersions(ctx context.Context, name string) ([]wire.Version, error) {
	var out []wire.Version
	cursor := ""
	for {
		q := url.Values{"limit": {"1000"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page wire.Page[wire.Version]
		if err := c.call(ctx, "GET", fnPath(name, "versions")+"?"+q.Encode(), nil, &page); err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if page.NextCursor == "" {
			return out, nil
		}
		cursor = page.NextCursor
	}
}

// RollbackFunction makes an earlier version of function name active again, the same safe way
// as a deploy (started and warmed up before traffic moves). to is its hash or a unique prefix
// of one; "" is the version active before the current one. progress, when not nil, gets each
// step as DeployStream's. Errors: IsNotFound (no such function, or to matches no version),
// IsBadRequest (to is ambiguous or not a hash), IsConflict (no earlier version), and a
// deploy's (import_failed).
func (c *Client) RollbackFunction(ctx context.Context, name, to string, progress func(wire.DeployEvent)) (wire.DeployResult, error) {
	b, err := json.Marshal(wire.RollbackFunctionBody{To: to})
	if err != nil {
		return wire.DeployResult{}, fmt.Errorf("encoding request: %w", err)
	}
	return c.deployStream(ctx, fnPath(name, "rollback"), bytes.NewReader(b), "application/json", progress)
}

// deployStream posts body to path (a deploy or rollback), asking for wire.DeployEvents when
// progress is set, and returns the result.
func (c *Client) deployStream(ctx context.Context, path string, body io.Reader, ctype string, progress func(wire.DeployEvent)) (wire.DeployResult, error) {
	var res wire.DeployResult
	req, err := http.NewRequestWithContext(ctx, "POST", c.base+path, body)
	if err != nil {
		return res, fmt.Errorf("making request POST %s: %w", path, err)
	}
	req.Header.Set("Content-Type", ctype)
	if progress != nil {
		req.Header.Set("Accept", wire.DeployStreamType)
		progress(wire.DeployEvent{Step: wire.StepUploading})
	}
	resp, err := c.send(ctx, req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != wire.DeployStreamType {
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			return res, fmt.Errorf("decoding the answer to POST %s: %w", path, err)
		}
		return res, nil
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev wire.DeployEvent
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			return res, fmt.Errorf("reading deploy progress: the stream ended before the answer: %w", err)
		}
		switch {
		case ev.Error != nil:
			return res, &Error{Status: ev.Status, ErrorBody: *ev.Error}
		case ev.Result != nil:
			return *ev.Result, nil
		case ev.Step != "" && progress != nil && ev.Step != wire.StepUploading:
			progress(ev)
		}
	}
}
