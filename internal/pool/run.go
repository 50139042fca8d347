package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/cgroup"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/redact"
	"github.com/zygo-run/zygo/internal/secret"
	"github.com/zygo-run/zygo/internal/store"
)

// RunRequest is one script run in a pool.
type RunRequest struct {
	Tenant string
	// Hash names a stored script of the tenant; Source, when Hash is
	// empty, is a script sent inline (stored like an upload first).
	Hash   string
	Source Script
	Entry  string          // MODULE:FUNCTION; "" is DefaultEntry
	Event  json.RawMessage // valid JSON, at most limits.max_request_kib
	// Secrets names secrets of the tenant (secret.TenantName), written into
	// /run/secrets/NAME of the tenant's own zygote for this request.
	Secrets []string
}

// RunResult is the outcome of Run.
type RunResult struct {
	*agentproc.Result
	RequestID string
	Hash      string
	Lane      string // the zygote that served it: "shared" or "tenant:T"
	Mounted   bool   // false: the script was copied into the request directory (logged)
}

// Run runs one script request in pool name. The error is non-nil when the
// request did not run: ErrNotFound (pool, script), ErrInvalidArgument
// naming the field, ErrTooLarge (event), *TooManyRequestsError,
// ErrUnavailable; what happened to a request that ran is in the result.
func (m *Manager) Run(ctx context.Context, name string, rr RunRequest) (*RunResult, error) {
	p, err := m.get(name)
	if err != nil {
		return nil, err
	}
	if err := p.check(&rr); err != nil {
		return nil, err
	}
	values, err := m.tenantSecrets(ctx, rr.Tenant, rr.Secrets)
	if err != nil {
		return nil, err
	}
	if rr.Hash == "" {
		if rr.Hash, err = p.scripts.put(rr.Tenant, rr.Source); err != nil {
			return nil, err
		}
	} else if err := p.scripts.has(rr.Tenant, rr.Hash); err != nil {
		return nil, err
	}
	release, err := p.adm.acquire(ctx, rr.Tenant)
	if err != nil {
		return nil, err
	}
	defer release()
	own := p.man.Isolation == IsolationPerTenant || len(values) > 0
	l, err := p.laneFor(ctx, rr.Tenant, own)
	if err != nil {
		return nil, err
	}
	defer p.leave(l)
	res := &RunResult{RequestID: newRequestID(), Hash: rr.Hash, Lane: laneName(l.key)}
	script, closeScript, why, err := p.script(rr)
	if err != nil {
		return nil, err
	}
	// Closing the detached mount unmounts it (0.1-0.4 ms on this host): off the
	// request path; the child holds its own descriptor of it.
	defer p.m.goTracked(closeScript)
	script.Shared = !own
	res.Mounted = script.Mount != nil
	req := agentproc.Request{ID: res.RequestID, Event: rr.Event, Timeout: time.Duration(p.man.Limits.TimeoutMs) * time.Millisecond,
		Function: p.owner(), Version: rr.Hash[:12], Strict: p.man.Strict,
		MaxResponseBytes: int64(p.man.Limits.MaxResponseKiB) << 10, Script: script}
	if len(values) > 0 {
		req.Redact = redact.New(values)
	}
	call := callOf(req, values, p.place(res.RequestID))
	out, err := l.runner.Run(ctx, call)
	if err != nil {
		return nil, err
	}
	if e := out.Error; e != nil && req.Redact != nil {
		e.Message, e.Traceback, e.Type = req.Redact.String(e.Message), req.Redact.String(e.Traceback), req.Redact.String(e.Type)
	}
	res.Result = out
	p.logRequest(rr, res, why)
	return res, nil
}

// check validates rr's fields (and fills the default entry).
func (p *pool) check(rr *RunRequest) error {
	if err := secret.ValidTenant("tenant", rr.Tenant); err != nil {
		return err
	}
	switch {
	case rr.Hash == "" && len(rr.Source) == 0:
		return fmt.Errorf("%w: script: give a script hash or an inline source", errdefs.ErrInvalidArgument)
	case rr.Hash != "" && len(rr.Source) > 0:
		return fmt.Errorf("%w: script: give a script hash or an inline source, not both", errdefs.ErrInvalidArgument)
	case rr.Hash != "":
		if err := ValidHash("script", rr.Hash); err != nil {
			return err
		}
	}
	if rr.Entry == "" {
		rr.Entry = DefaultEntry
	}
	if err := ValidEntry("entry", rr.Entry); err != nil {
		return err
	}
	if len(rr.Event) == 0 {
		rr.Event = json.RawMessage("null")
	}
	if max := p.man.Limits.MaxRequestKiB << 10; len(rr.Event) > max {
		return fmt.Errorf("%w: event: %d bytes, over max_request_kib (%d KiB)", errdefs.ErrTooLarge, len(rr.Event), p.man.Limits.MaxRequestKiB)
	}
	if !json.Valid(rr.Event) {
		return fmt.Errorf("%w: event: not valid JSON", errdefs.ErrInvalidArgument)
	}
	for i, s := range rr.Secrets {
		if err := secret.ValidName(secret.TenantName(rr.Tenant, s)); err != nil || s == "" {
			return fmt.Errorf("%w: secrets[%d]: %q is not a secret name (letters, digits, _; the tenant's prefix makes at most 128 in all)", errdefs.ErrInvalidArgument, i, s)
		}
	}
	return nil
}

// tenantSecrets decrypts tenant's secrets names (by short name).
func (m *Manager) tenantSecrets(ctx context.Context, tenant string, names []string) (map[string][]byte, error) {
	if len(names) == 0 {
		return nil, nil
	}
	if m.cfg.Secrets == nil {
		return nil, fmt.Errorf("%w: secrets: this daemon holds no secrets", errdefs.ErrInvalidArgument)
	}
	full := make([]string, len(names))
	for i, n := range names {
		full[i] = secret.TenantName(tenant, n)
	}
	missing, err := m.cfg.Secrets.Missing(ctx, full)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: secrets: tenant %q has no secret %s (set it with zygo secret set --tenant %s NAME)",
			errdefs.ErrInvalidArgument, tenant, strings.TrimPrefix(missing[0], secret.TenantName(tenant, "")), tenant)
	}
	out := make(map[string][]byte, len(names))
	for i, n := range names {
		v, err := m.cfg.Secrets.Value(ctx, full[i])
		if err != nil {
			return nil, fmt.Errorf("reading secret %q of tenant %q: %w", n, tenant, err)
		}
		out[n] = v
	}
	return out, nil
}

// script returns the request's agentproc.Script: a read-only mount of the
// script's directory, or (when none can be made) its files, with why, for
// the request's log. The returned close releases the mount. Errors: the
// files could not be read either (ErrUnavailable).
func (p *pool) script(rr RunRequest) (s *agentproc.Script, closeIt func(), why string, err error) {
	s = &agentproc.Script{Tenant: rr.Tenant, Hash: rr.Hash, Entry: rr.Entry}
	f, merr := p.m.cfg.Mount(p.scripts.dir(rr.Tenant, rr.Hash))
	if merr == nil {
		s.Mount = f
		return s, func() { f.Close() }, "", nil
	}
	files, err := p.scripts.read(rr.Tenant, rr.Hash)
	if err != nil {
		return nil, nil, "", fmt.Errorf("%w: script %s of tenant %q could be neither mounted (%w) nor read: %w", errdefs.ErrUnavailable, rr.Hash, rr.Tenant, merr, err)
	}
	s.Files = files
	return s, func() {}, merr.Error(), nil
}

// place returns the request's cgroup placement (nil without a Limiter):
// a group of the pool's pooled groups with the per-request limits, its CPU
// time and pids watched, a death by a limit reclassified. A child the
// lane's pool held in its group already (hold) is not placed again.
func (p *pool) place(reqID string) func(context.Context, int) (func(*agentproc.Result), error) {
	lim := p.m.cfg.Limiter
	if lim == nil {
		return nil
	}
	return func(ctx context.Context, hostPID int) (func(*agentproc.Result), error) {
		g, err := lim.PlacePooled(ctx, p.owner(), hostPID, p.requestLimits())
		if err != nil {
			return nil, fmt.Errorf("placing the child in its cgroup: %w", err)
		}
		return p.enforce(reqID, g), nil
	}
}

func (p *pool) requestLimits() cgroup.Limits {
	l := p.man.Limits
	return cgroup.Limits{MemoryMiB: l.MemoryMiB, PIDs: l.PIDs, CPUMs: l.CPUMs}
}

// hold is RunnerOptions.Hold of the pool's lanes, as a function's
// (function.Manager.holdInCgroup): a pre-forked child is moved into a
// request cgroup of its own when it joins its lane's pool, off the request
// path (on cgroup v1 a move after a quiet spell waits for the kernel), and
// its request restarts the group's CPU count at GO (heldGroup.Begin). The
// limits are the pool's per-request limits, the same for every tenant; the
// group is released (reset, or deleted) after each request, as a placed
// one. Nil without a Limiter.
func (p *pool) hold() func(context.Context, int) (agentproc.Held, error) {
	lim := p.m.cfg.Limiter
	if lim == nil {
		return nil
	}
	return func(ctx context.Context, hostPID int) (agentproc.Held, error) {
		g, err := lim.HoldPooled(ctx, p.owner(), hostPID, p.requestLimits())
		if err != nil {
			return nil, fmt.Errorf("placing the child in its request cgroup: %w", err)
		}
		return &heldGroup{p: p, g: g}, nil
	}
}

// heldGroup is an idle child's request cgroup (hold).
type heldGroup struct {
	p *pool
	g *cgroup.Group
}

// Begin implements agentproc.Held: the CPU count restarts and the limits
// are enforced from now.
func (h *heldGroup) Begin(_ context.Context, requestID string) (func(*agentproc.Result), error) {
	if err := h.g.Begin(); err != nil {
		h.p.release(requestID, h.g, nil) // the child is killed: Release waits for it, then deletes
		return nil, fmt.Errorf("starting the request's cgroup: %w", err)
	}
	return h.p.enforce(requestID, h.g), nil
}

// Drop implements agentproc.Held.
func (h *heldGroup) Drop(gone <-chan struct{}) { h.p.release("", h.g, gone) }

// enforce watches g, the request's group, with Enforce until the outcome is
// known; the returned after reclassifies a death caused by a limit and
// releases the group once the child is gone.
func (p *pool) enforce(reqID string, g *cgroup.Group) func(*agentproc.Result) {
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	if l := g.Limits(); l.CPUMs > 0 || l.PIDs > 0 { // else nothing to watch: no goroutine
		go func() {
			defer close(done)
			g.Enforce(wctx, 20*time.Millisecond)
		}()
	} else {
		close(done)
	}
	return func(res *agentproc.Result) {
		stop()
		<-done
		if res.Failure != agentproc.FailNone && res.Failure != agentproc.FailTimeout {
			if limit, value := g.Exceeded(); limit != "" {
				res.Failure = agentproc.FailLimit
				res.Error = &agentproc.HandlerError{Type: "LimitExceeded",
					Message: fmt.Sprintf("%s limit exceeded: %s (the request was killed)", limit, value)}
			}
		}
		p.release(reqID, g, res.Gone())
	}
}

// release releases g (Group.Release) in the background once gone is closed
// (nil: at once) or the manager stops.
func (p *pool) release(reqID string, g *cgroup.Group, gone <-chan struct{}) {
	p.m.goTracked(func() {
		if gone != nil {
			select {
			case <-gone:
			case <-p.m.ctx.Done():
			}
		}
		if err := g.Release(); err != nil {
			p.log.Warn("releasing request cgroup", "request_id", reqID, "err", err)
		}
	})
}

// logRequest stores the request's output and one zygo line (its tenant,
// script, lane and outcome; and, when the script was not mounted, why and
// that its files were copied into the request directory).
func (p *pool) logRequest(rr RunRequest, res *RunResult, why string) {
	now := time.Now()
	line := func(stream, text string) store.LogLine {
		return store.LogLine{Function: p.owner(), Version: res.Hash[:12], RequestID: res.RequestID, Stream: stream, At: now, Line: text}
	}
	var lines []store.LogLine
	for _, s := range res.Stdout {
		lines = append(lines, line("stdout", s))
	}
	for _, s := range res.Stderr {
		lines = append(lines, line("stderr", s))
	}
	if why != "" {
		lines = append(lines, line("zygo", "script not mounted ("+why+"): its files were copied into the request directory instead"))
	}
	outcome := "ok"
	if res.Failure != agentproc.FailNone {
		outcome = string(res.Failure)
	}
	lines = append(lines, line("zygo", fmt.Sprintf("tenant=%s script=%s entry=%s lane=%s mounted=%t outcome=%s elapsed_ms=%.1f",
		rr.Tenant, res.Hash, rr.Entry, res.Lane, res.Mounted, outcome, float64(res.Elapsed.Microseconds())/1000)))
	p.m.goTracked(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.m.reg.AppendLogs(ctx, lines); err != nil {
			p.log.Warn("storing pool request logs", "request_id", res.RequestID, "err", err)
		}
	})
}

// zygoteOutput stores what a lane's zygote prints on its own fds.
func (p *pool) zygoteOutput(requestID, stream string, text []string) {
	now := time.Now()
	lines := make([]store.LogLine, len(text))
	for i, t := range text {
		lines[i] = store.LogLine{Function: p.owner(), Version: p.bootHash[:12], RequestID: requestID, Stream: stream, At: now, Line: t}
	}
	p.m.goTracked(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.m.reg.AppendLogs(ctx, lines)
	})
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "pr-" + hex.EncodeToString(b[:])
}

func callOf(req agentproc.Request, secrets map[string][]byte, place func(context.Context, int) (func(*agentproc.Result), error)) function.Call {
	return function.Call{Request: req, Secrets: secrets, Place: place}
}
