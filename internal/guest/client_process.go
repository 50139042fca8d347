package guest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// Host-side bounds on what the agent sends back for the process table and the filesystem
// operations: the agent is inside the sandbox, so every answer is read through a bound.
const (
	// maxEventBytes bounds one NDJSON line of a stream (an output chunk is at most 32 KiB,
	// about 44 KiB in JSON).
	maxEventBytes = 1 << 20
	// maxAnswerBytes bounds one JSON answer: a process list (each config's argv and env at
	// most 2 MiB) or a listing of MaxDirEntries entries (each path at most 4 KiB).
	maxAnswerBytes = 64 << 20
	// firstEventTimeout bounds the wait for a stream's answer and its start event (a watch's
	// answer, once its watches are in), whatever the caller's ctx: a sound agent sends them at
	// once.
	firstEventTimeout = 30 * time.Second
)

// acquireStream takes one of the MaxOpenStreams slots for a long-lived stream, or returns an
// error wrapping errdefs.ErrTooManyRequests.
func (c *Client) acquireStream() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams >= MaxOpenStreams {
		return fmt.Errorf("the sandbox has %d process and watch streams open, the most at once: close some: %w",
			c.streams, errdefs.ErrTooManyRequests)
	}
	c.streams++
	return nil
}

func (c *Client) releaseStream() {
	c.mu.Lock()
	c.streams--
	c.mu.Unlock()
}

// lineReader reads NDJSON lines of at most max bytes.
type lineReader struct {
	br  *bufio.Reader
	max int
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line, without its '\n'. A line over max is an error.
func (l *lineReader) next() ([]byte, error) {
	var line []byte
	for {
		frag, err := l.br.ReadSlice('\n')
		if len(line)+len(frag) > l.max {
			return nil, fmt.Errorf("the guest sent a line of more than %d bytes", l.max)
		}
		line = append(line, frag...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case !errors.Is(err, bufio.ErrBufferFull):
			return nil, err
		}
	}
}

// readProcessEvent reads and checks one event of a process stream.
func readProcessEvent(l *lineReader) (ProcessEvent, error) {
	line, err := l.next()
	if err != nil {
		return ProcessEvent{}, err
	}
	var ev ProcessEvent
	if err := json.Unmarshal(line, &ev); err != nil {
		return ProcessEvent{}, fmt.Errorf("decoding a process event: %w", err)
	}
	switch ev.Kind {
	case ProcessStart, ProcessStdout, ProcessStderr, ProcessEnd:
		return ev, nil
	}
	return ProcessEvent{}, fmt.Errorf("the guest sent a process event of kind %q", ev.Kind)
}

// StartProcess starts cfg in the agent's process table (see ProcessConfig) and streams its
// events: the first is ProcessStart with the pid, then its output, then ProcessEnd, after
// which the channel is closed. The channel is also closed, without an end, when ctx ends or
// the channel to the guest breaks (a checkpoint cuts it): the process keeps running either
// way, and ConnectProcess follows it again. The caller must read the channel until it is
// closed or end ctx. Errors: a missing program or cwd wraps errdefs.ErrNotFound, a tag in
// use errdefs.ErrExists, an unknown user errdefs.ErrInvalidArgument, too many streams open
// errdefs.ErrTooManyRequests.
func (c *Client) StartProcess(ctx context.Context, cfg ProcessConfig) (<-chan ProcessEvent, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encoding process config: %w", err)
	}
	return c.processStream(ctx, "/v1/processes", nil, bytes.NewReader(b))
}

// ConnectProcess streams the events of the running process sel names as StartProcess does:
// ProcessStart with its pid, its output from now on, then ProcessEnd. A process that ended
// within the last minute gets ProcessStart and ProcessEnd at once. An unknown pid or tag is
// an error wrapping errdefs.ErrNotFound.
func (c *Client) ConnectProcess(ctx context.Context, sel ProcessSelector) (<-chan ProcessEvent, error) {
	return c.processStream(ctx, "/v1/processes/connect", selectorQuery(sel), nil)
}

func selectorQuery(sel ProcessSelector) url.Values {
	q := url.Values{}
	if sel.PID != 0 {
		q.Set("pid", strconv.FormatUint(uint64(sel.PID), 10))
	}
	if sel.Tag != "" {
		q.Set("tag", sel.Tag)
	}
	return q
}

// processStream posts body to path and relays the NDJSON ProcessEvents of the answer on a
// channel, from a goroutine that ends with ctx, the stream's end or its failure.
func (c *Client) processStream(ctx context.Context, path string, q url.Values, body io.Reader) (<-chan ProcessEvent, error) {
	if err := c.acquireStream(); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	// The answer and its start event come at once from a sound agent: bounded, whatever ctx.
	timer := time.AfterFunc(firstEventTimeout, cancel)
	resp, err := c.do(rctx, http.MethodPost, path, q, body)
	if err != nil {
		timedOut := !timer.Stop()
		cancel()
		c.releaseStream()
		if timedOut && ctx.Err() == nil {
			return nil, fmt.Errorf("the guest did not answer %s within %s: %w", path, firstEventTimeout, errdefs.ErrUnavailable)
		}
		return nil, err
	}
	lr := newLineReader(resp.Body, maxEventBytes)
	first, err := readProcessEvent(lr)
	if !timer.Stop() && err != nil {
		err = fmt.Errorf("no start event within %s", firstEventTimeout)
	}
	if err == nil && (first.Kind != ProcessStart || first.PID == 0) {
		err = fmt.Errorf("the first event is %q with pid %d, not a start", first.Kind, first.PID)
	}
	if err != nil {
		resp.Body.Close()
		cancel()
		c.releaseStream()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("reading guest stream %s: %w: %w", path, ctx.Err(), errdefs.ErrUnavailable)
		}
		return nil, fmt.Errorf("reading guest stream %s: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	ch := make(chan ProcessEvent, 1)
	ch <- first
	go func() {
		defer close(ch)
		defer c.releaseStream()
		defer cancel()
		defer resp.Body.Close()
		for {
			ev, err := readProcessEvent(lr)
			if err != nil || ev.Kind == ProcessStart {
				return
			}
			select {
			case ch <- ev:
			case <-rctx.Done():
				return
			}
			if ev.Kind == ProcessEnd {
				return
			}
		}
	}()
	return ch, nil
}

// ListProcesses returns the running processes of the agent's table, by pid.
func (c *Client) ListProcesses(ctx context.Context) ([]ProcessInfo, error) {
	var out []ProcessInfo
	if err := c.getJSON(ctx, "/v1/processes", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// SendInput writes data to the stdin of the process sel names. An unknown process is an error
// wrapping errdefs.ErrNotFound; one whose stdin is closed or was not kept open
// errdefs.ErrFailedPrecondition. When ctx ends during the write, what was written stays.
func (c *Client) SendInput(ctx context.Context, sel ProcessSelector, data []byte) error {
	return c.post(ctx, "/v1/processes/input", selectorQuery(sel), bytes.NewReader(data))
}

// CloseStdin closes the stdin of the process sel names (it reads EOF). Idempotent.
func (c *Client) CloseStdin(ctx context.Context, sel ProcessSelector) error {
	return c.post(ctx, "/v1/processes/close-stdin", selectorQuery(sel), nil)
}

// SignalProcess sends sig to the process sel names and to its process group.
func (c *Client) SignalProcess(ctx context.Context, sel ProcessSelector, sig syscall.Signal) error {
	q := selectorQuery(sel)
	q.Set("signal", strconv.Itoa(int(sig)))
	return c.post(ctx, "/v1/processes/signal", q, nil)
}

// Stat describes the entry at the absolute path (a symlink itself, not its target).
func (c *Client) Stat(ctx context.Context, path string) (EntryInfo, error) {
	var e EntryInfo
	err := c.getJSON(ctx, "/v1/fs/stat", url.Values{"path": {path}}, &e)
	return e, err
}

// ListDir lists the directory at path, depth levels deep (1: its entries), at most
// MaxDirEntries entries (more is an error wrapping errdefs.ErrTooLarge).
func (c *Client) ListDir(ctx context.Context, path string, depth int) ([]EntryInfo, error) {
	var out []EntryInfo
	err := c.getJSON(ctx, "/v1/fs/list", url.Values{"path": {path}, "depth": {strconv.Itoa(depth)}}, &out)
	if err == nil && len(out) > MaxDirEntries {
		return nil, fmt.Errorf("guest listed %d entries, more than %d: %w", len(out), MaxDirEntries, errdefs.ErrUnavailable)
	}
	return out, err
}

// MakeDir makes the directory path and its missing parents (owned by user when not ""), and
// describes it. An existing path is an error wrapping errdefs.ErrExists.
func (c *Client) MakeDir(ctx context.Context, path, user string) (EntryInfo, error) {
	q := url.Values{"path": {path}}
	if user != "" {
		q.Set("user", user)
	}
	var e EntryInfo
	err := c.postJSON(ctx, "/v1/fs/mkdir", q, &e)
	return e, err
}

// Move renames src to dst (making dst's parents) and describes dst. A missing src is an
// error wrapping errdefs.ErrNotFound, an existing dst errdefs.ErrExists.
func (c *Client) Move(ctx context.Context, src, dst string) (EntryInfo, error) {
	var e EntryInfo
	err := c.postJSON(ctx, "/v1/fs/move", url.Values{"src": {src}, "dst": {dst}}, &e)
	return e, err
}

// ReplaceFile renames the regular file src over dst in one step (dst, if any, a regular
// file or a symlink; its directory must exist).
func (c *Client) ReplaceFile(ctx context.Context, src, dst string) error {
	return c.post(ctx, "/v1/fs/move", url.Values{"src": {src}, "dst": {dst}, "replace": {"1"}}, nil)
}

// RemovePath removes path and everything below it; a missing path is an error wrapping
// errdefs.ErrNotFound.
func (c *Client) RemovePath(ctx context.Context, path string) error {
	return c.post(ctx, "/v1/fs/remove", url.Values{"path": {path}}, nil)
}

// UserInfo returns the user name of the sandbox's /etc/passwd ("" is root); an unknown one is
// an error wrapping errdefs.ErrInvalidArgument.
func (c *Client) UserInfo(ctx context.Context, name string) (UserInfo, error) {
	var u UserInfo
	err := c.getJSON(ctx, "/v1/users", url.Values{"name": {name}}, &u)
	return u, err
}

// WatchDir streams the changes under the directory path (and below it with recursive) once
// every watch is in place, until ctx ends or the channel to the guest breaks; then the
// channel is closed. The caller must read it until then or end ctx. What the kernel's queue
// cannot hold while the caller does not read is lost.
func (c *Client) WatchDir(ctx context.Context, path string, recursive bool) (<-chan FsEvent, error) {
	if err := c.acquireStream(); err != nil {
		return nil, err
	}
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "1")
	}
	rctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(firstEventTimeout, cancel) // the agent answers once its watches are in
	resp, err := c.do(rctx, http.MethodGet, "/v1/fs/watch", q, nil)
	if !timer.Stop() && ctx.Err() == nil {
		if err == nil {
			resp.Body.Close()
		}
		err = fmt.Errorf("the guest did not answer the watch of %s within %s: %w", path, firstEventTimeout, errdefs.ErrUnavailable)
	}
	if err != nil {
		cancel()
		c.releaseStream()
		return nil, err
	}
	ch := make(chan FsEvent)
	go func() {
		defer close(ch)
		defer c.releaseStream()
		defer cancel()
		defer resp.Body.Close()
		lr := newLineReader(resp.Body, maxEventBytes)
		for {
			line, err := lr.next()
			if err != nil {
				return
			}
			var ev FsEvent
			if json.Unmarshal(line, &ev) != nil || ev.Op == "" {
				return
			}
			select {
			case ch <- ev:
			case <-rctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// post sends a request whose answer has no body.
func (c *Client) post(ctx context.Context, path string, q url.Values, body io.Reader) error {
	resp, err := c.do(ctx, http.MethodPost, path, q, body)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func (c *Client) getJSON(ctx context.Context, path string, q url.Values, out any) error {
	return c.queryJSON(ctx, http.MethodGet, path, q, out)
}

func (c *Client) postJSON(ctx context.Context, path string, q url.Values, out any) error {
	return c.queryJSON(ctx, http.MethodPost, path, q, out)
}

// queryJSON sends a request without a body and decodes its JSON answer, read through
// maxAnswerBytes.
func (c *Client) queryJSON(ctx context.Context, method, path string, q url.Values, out any) error {
	resp, err := c.do(ctx, method, path, q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswerBytes)).Decode(out); err != nil {
		return fmt.Errorf("decoding guest answer to %s (at most %d bytes): %w: %w", path, maxAnswerBytes, err, errdefs.ErrUnavailable)
	}
	return nil
}
