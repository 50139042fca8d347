package function

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/redact"
	"github.com/zygo-run/zygo/internal/store"
)

// Invocation is the outcome of one request.
type Invocation struct {
	RequestID string
	Version   string
	Value     json.RawMessage   // set on success
	Failure   agentproc.Failure // "" on success
	Error     *agentproc.HandlerError
	Elapsed   time.Duration
	Spawned   bool                // served by a fresh interpreter, not a fork
	Child     agentproc.ChildKind // preforked, forked, spawned or worker
	Phases    []agentproc.Phase   // the daemon's timed steps of the request, in order
}

// Invoke runs one request of function name with the event read from body
// (size bytes, or -1 when unknown; at most max_request_kib, read only after
// the body budget has room for it, and never past the limit). A request
// that waits for a concurrency slot of a version that is replaced meanwhile
// is served by the version current when it gets a slot. It returns an error
// only when the request could not be run at all: errdefs.ErrNotFound (no
// such function), errdefs.ErrTooLarge (event over the limit),
// errdefs.ErrInvalidArgument (event not UTF-8 JSON), errdefs.ErrUnavailable
// (no zygote came up in time, or the daemon is stopping). What happens to
// a request that ran — including handler errors, timeouts, crashes and an
// event the runtime's parser refused — is in the Invocation.
func (m *Manager) Invoke(ctx context.Context, name string, body io.Reader, size int64) (_ *Invocation, err error) {
	arrived := time.Now()
	d := m.get(name)
	if d == nil {
		return nil, fmt.Errorf("function %q: %w", name, errdefs.ErrNotFound)
	}
	var inv *Invocation
	defer func() { d.obs.Request(outcome(inv, err), time.Since(arrived)) }()
	event, release, err := m.readEvent(ctx, body, size, d.manifest.Limits.MaxRequestKiB)
	defer release()
	if err != nil {
		return nil, err
	}
	if len(event) == 0 {
		event = []byte("{}")
	}
	if depth := jsonDepth(event); depth > MaxEventDepth {
		// Valid JSON no runtime's parser would take: refused as a runtime refuses an event
		// (bad_event), before any runs it.
		inv = &Invocation{RequestID: newID("r"), Version: d.version, Failure: agentproc.FailBadEvent,
			Error: &agentproc.HandlerError{Type: "EventRejected", Message: fmt.Sprintf(
				"event: nests %d levels deep (arrays and objects inside one another): at most %d", depth, MaxEventDepth)}}
		return inv, nil
	}
	if err := checkEvent(event); err != nil {
		return nil, err
	}
	for {
		if max := d.manifest.Limits.MaxRequestKiB << 10; len(event) > max {
			return nil, fmt.Errorf("%w: event: exceeds max_request_kib=%d", errdefs.ErrTooLarge, d.manifest.Limits.MaxRequestKiB)
		}
		inv, err = m.invokeOn(ctx, d, event, arrived)
		if !errors.Is(err, errRetired) {
			return inv, err
		}
		inv = nil
		next := m.get(name)
		switch {
		case next == nil && d.deployFailed.Load():
			return nil, fmt.Errorf("%w: function %q failed to deploy while the request waited for it", errdefs.ErrUnavailable, name)
		case next == nil:
			return nil, fmt.Errorf("function %q was removed: %w", name, errdefs.ErrNotFound)
		case next == d:
			return nil, fmt.Errorf("%w: function %q is stopping", errdefs.ErrUnavailable, name)
		}
		d = next
	}
}

// invokeOn runs the request on deployment d, holding one of its slots;
// errRetired when d was halted before the request started on it. The
// request's timeout_ms runs from arrived: time waiting in the queue or for
// a deploying version counts against it.
func (m *Manager) invokeOn(ctx context.Context, d *deployment, event []byte, arrived time.Time) (*Invocation, error) {
	deadline := arrived.Add(time.Duration(d.manifest.Limits.TimeoutMs) * time.Millisecond)
	wait, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if err := d.admit(wait); err != nil {
		return nil, d.waitFailed(ctx, err)
	}
	defer d.releaseSlot()
	d.inflight.Add(1)
	defer d.inflight.Add(-1)

	rt, err := d.current(wait)
	if err != nil {
		return nil, d.waitFailed(ctx, err)
	}
	left := time.Until(deadline)
	if left <= 0 {
		return nil, d.waitFailed(ctx, context.DeadlineExceeded)
	}
	req := agentproc.Request{
		ID: newID("r"), Event: event, Function: d.name, Version: d.version, Strict: d.manifest.Strict,
		Timeout:          left,
		MaxResponseBytes: int64(d.manifest.Limits.MaxResponseKiB) << 10,
	}
	values, err := m.secretValues(ctx, d.manifest.Secrets)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", errdefs.ErrFailedPrecondition, err) //nolint:errorlint // one cause on purpose: a secret's own category (not found) is not the call's
	}
	req.Redact = redact.New(values)
	inv := &Invocation{RequestID: req.ID, Version: d.version}
	call := Call{Request: req, Secrets: values}
	if m.limiter != nil {
		call.Place = func(ctx context.Context, hostPID int) (func(*agentproc.Result), error) {
			return m.placeInCgroup(ctx, d, req.ID, hostPID)
		}
	}
	res, err := rt.Run(ctx, call)
	if errors.Is(err, errdefs.ErrUnavailable) && d.isStopped() {
		return nil, errRetired // drained between current and Run
	}
	if err != nil {
		return nil, err
	}
	redactResult(res, req.Redact)
	if res.Failure == agentproc.FailTimeout && res.Error != nil {
		// The request ran with what was left of timeout_ms at its arrival: the message names
		// the manifest's timeout_ms, and the wait when it was long enough to matter (100 ms).
		res.Error.Message = fmt.Sprintf("timeout: request exceeded timeout_ms=%d and was killed", d.manifest.Limits.TimeoutMs)
		if waited := time.Duration(d.manifest.Limits.TimeoutMs)*time.Millisecond - req.Timeout; waited >= 100*time.Millisecond {
			res.Error.Message = fmt.Sprintf("timeout: request exceeded timeout_ms=%d (%d ms of it waiting for a concurrency slot) and was killed",
				d.manifest.Limits.TimeoutMs, waited.Milliseconds())
		}
	}
	d.served.Add(1)
	d.observeRun(res.Elapsed)
	if m.log.Enabled(ctx, slog.LevelDebug) {
		m.log.Debug("request done", "function", d.name, "request_id", req.ID, "failure", res.Failure, "phases", res.Phases)
	}
	inv.Value, inv.Failure, inv.Error, inv.Elapsed, inv.Child = res.Value, res.Failure, res.Error, res.Elapsed, res.Child
	inv.Spawned = res.Child == agentproc.ChildSpawned
	inv.Phases = res.Phases
	m.appendLogs(ctx, requestLines(d, req.ID, CallerID(ctx), res))
	return inv, nil
}

// requestLines returns the request's output and Zygo's status line of it as log lines; each
// carries the caller's id (caller, may be ""), which the status line also names.
func requestLines(d *deployment, id, caller string, res *agentproc.Result) []store.LogLine {
	now := time.Now()
	out := make([]store.LogLine, 0, len(res.Stdout)+len(res.Stderr)+1)
	for _, l := range res.Stdout {
		out = append(out, store.LogLine{Function: d.name, Version: d.version, RequestID: id, CallerID: caller, Stream: "stdout", At: now, Line: l})
	}
	for _, l := range res.Stderr {
		out = append(out, store.LogLine{Function: d.name, Version: d.version, RequestID: id, CallerID: caller, Stream: "stderr", At: now, Line: l})
	}
	var status string
	if res.Failure != agentproc.FailNone && res.Error != nil {
		status = fmt.Sprintf("request %s failed (%s) in %.1f ms: %s: %s", id, res.Failure,
			float64(res.Elapsed.Microseconds())/1000, res.Error.Type, res.Error.Message)
		if caller != "" {
			status += " (caller id " + caller + ")"
		}
	} else {
		// "request ID done in %.1f ms", without fmt's reflection: every request writes one.
		b := make([]byte, 0, 64+len(id)+len(caller))
		b = append(append(append(b, "request "...), id...), " done in "...)
		b = append(strconv.AppendFloat(b, float64(res.Elapsed.Microseconds())/1000, 'f', 1, 64), " ms"...)
		if caller != "" {
			b = append(append(append(b, " (caller id "...), caller...), ')')
		}
		status = string(b)
	}
	out = append(out, store.LogLine{Function: d.name, Version: d.version, RequestID: id, CallerID: caller, Stream: "zygo", At: now, Line: status})
	return out
}
