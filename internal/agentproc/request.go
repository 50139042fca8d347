package agentproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/redact"
	"github.com/zygo-run/zygo/internal/untrusted"
)

// Request is one invocation.
type Request struct {
	ID       string          // public request id (logs, headers)
	Event    json.RawMessage // the event, valid JSON
	Timeout  time.Duration   // wall time from Run's start; the child is killed after it
	Function string
	Version  string
	Strict   bool
	// MaxResponseBytes bounds result.json; a larger result fails the request.
	MaxResponseBytes int64
	// BeforeGo runs after the child exists and before it is told GO, with the
	// child's host pid (secrets, cgroup placement); held says the child was
	// readied by Spec.Hold (already in its request cgroup, begun before
	// BeforeGo runs), so the hook must not place it. An error kills the child
	// and fails the request; the hook undoes its own partial work. On
	// success, the returned after (if not nil) is called once the outcome is
	// known — result.json written, or the child exited or was killed — and
	// before Run returns: it may release resources and reclassify the
	// failure (a cgroup limit that killed the child). The child may still be
	// exiting when after runs. after is also called when err is not nil.
	BeforeGo func(ctx context.Context, hostPID int, held bool) (after func(*Result), err error)
	// Redact scrubs the request's secret values from its output, over each
	// whole stream before it is cut into lines or pieces (output.go); nil
	// redacts nothing.
	Redact *redact.Redactor
	// Script, when set, is a pool request's script (internal/pool): the
	// child loads Script.Entry from it after GO instead of calling the
	// zygote's handler. Nil for functions.
	Script *Script
}

// Script is the script of a pool request. Exactly one of Mount and Files
// is set.
type Script struct {
	Tenant string // the tenant the script belongs to
	Hash   string // its content hash
	Entry  string // MODULE:FUNCTION
	// Mount is a detached read-only mount of the script's directory (the
	// caller owns it and closes it after Run returns); it is attached to
	// the go message (SCM_RIGHTS), so the script's text never passes
	// through the zygote or the request directory.
	Mount *os.File
	// Files, when Mount is nil, are the script's files (relative path →
	// content), written read-only into the request directory's script/
	// before GO: the fallback when no mount can be made.
	Files map[string][]byte
	// Shared says the zygote serves other tenants too (a shared pool's
	// shared lane): the child then refuses the request every channel the
	// zygote's network and IPC namespace would give it to other tenants'
	// requests (docs/security.md, "Runtime pools").
	Shared bool
}

// Failure classifies why a request did not produce a value.
type Failure string

const (
	FailNone          Failure = ""
	FailHandler       Failure = "handler_error"      // the handler raised
	FailTimeout       Failure = "timeout"            // killed at the deadline
	FailCrashed       Failure = "crashed"            // the child died without a result
	FailZygote        Failure = "zygote_died"        // the zygote died under the request
	FailResponseLarge Failure = "response_too_large" // result.json over the limit
	FailInternal      Failure = "internal"           // Zygo could not run the request
	FailLimit         Failure = "limit_exceeded"     // memory_mib, pids or cpu_ms killed it
	FailBadEvent      Failure = "bad_event"          // the runtime's JSON parser refused the event
)

// Result is the outcome of Run.
type Result struct {
	Value   json.RawMessage // the handler's return value when Failure is FailNone
	Failure Failure
	Error   *HandlerError // details when Failure is not FailNone
	Stdout  []string      // lines the request printed, redacted and bounded (output.go)
	Stderr  []string
	HostPID int
	Child   ChildKind // where the request's process came from
	Elapsed time.Duration
	lap     time.Time // start of the current phase
	steps   []Phase   // the child's timing of its steps (result.json "steps"), after run
	gone    chan struct{}
	onGone  []func() // run by Run's release once gone is closed (OnGone)
	// noResult: the child ended and result.json was not there (a crash, or no room
	// to make it).
	noResult bool
	// dirErr: event.json could not be written after the socket refused the
	// go datagram (sendGo's eventFileError); Run answers it as
	// requestDirError, as when the directory could not be made.
	dirErr error

	// Phases records how long each step took, in order (for --debug and
	// benchmarks, the invoke answer's Server-Timing): dir, fork+hello,
	// before_go, go (sending GO), wait (GO sent to the result seen),
	// result (reading it), settle (the BeforeGo hook's after), the child's
	// own timing of its steps as child.NAME (child.pre.* before GO, then
	// child.reseed, child.handler, ...: the agent's report, a hint),
	// collect.
	Phases []Phase
	// phaseBuf holds Run's Phases: its eight steps and the child's, without
	// growing the slice as they are added.
	phaseBuf [8 + maxChildSteps]Phase
}

// Phase is one timed step of a request.
type Phase struct {
	Name string        `json:"name"`
	Took time.Duration `json:"took_ns"`
}

// Gone returns a channel closed once the request's process is gone (fork
// mode: reaped by the zygote; or killed and waited for, bounded) and its
// child released, after Run has returned. The BeforeGo hook's after may
// wait on it, off the request path, to release what the process held
// (its cgroup) without polling for the exit. A Result not made by Run has
// no channel: Gone returns nil (blocks forever).
func (r *Result) Gone() <-chan struct{} { return r.gone }

// OnGone has f run once the request's process is gone (when Gone is
// closed), where the request is released after Run returned — for a fork
// zygote's child, on the zygote's reader when its exited arrives
// (whenExited) — before Drain counts the request as finished: a release
// that needs the process gone (its cgroup's) costs no goroutine and no
// wake-up of its own. Call it only before Run returns (from the BeforeGo
// hook's after); f runs once, and must not block (it holds up the zygote's
// other exits; what may wait goes to a goroutine of its own). A Result not
// made by Run runs f at once.
func (r *Result) OnGone(f func()) {
	if r.gone == nil {
		f()
		return
	}
	r.onGone = append(r.onGone, f)
}

func (r *Result) mark(name string, since *time.Time) {
	now := time.Now()
	r.Phases = append(r.Phases, Phase{name, now.Sub(*since)})
	*since = now
}

// HandlerError describes a failed request.
type HandlerError struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback,omitempty"`
}

type resultFile struct {
	OK    bool          `json:"ok"`
	Value resultValue   `json:"value"`
	Error *HandlerError `json:"error"`
	// Rejected is "event" when the agent's JSON parser refused the event
	// before any user code ran (the caller's error, not the handler's).
	Rejected string `json:"rejected,omitempty"`
	// Steps is the child's timing of its steps after GO, [[name, ns], ...]
	// (docs/protocol.md): profiling only, never trusted for anything else.
	Steps stepPhases `json:"steps,omitempty"`
}

// resultValue is result.json's "value" as json.RawMessage holds it, without
// RawMessage's copy: its bytes are those of the buffer decoded, which
// readResult reads afresh for each result and never reuses (a value of
// megabytes was copied once more for nothing).
type resultValue []byte

// UnmarshalJSON keeps b, the value's bytes in the buffer being decoded.
func (v *resultValue) UnmarshalJSON(b []byte) error {
	*v = b[:len(b):len(b)]
	return nil
}

// maxChildSteps bounds the child's steps kept per request.
const maxChildSteps = 24

// stepPhases are result.json's steps as phases named child.NAME: only the
// well-formed [name, ns] pairs with a name the agent times (childSteps),
// each once (the last report of it, in the order first reported), at most
// maxChildSteps of them. Anything else in the list (another name, a
// malformed pair, a negative duration) is dropped without failing the
// request; a "steps" that is neither a list nor null fails the decode, as
// a list's type did.
type stepPhases struct {
	n int
	p [maxChildSteps]Phase
}

// phases returns the kept steps, in order; they share s's memory.
func (s *stepPhases) phases() []Phase { return s.p[:s.n] }

// UnmarshalJSON reads the steps list b, a value the JSON decoder has
// already checked (the whole of result.json is validated before any of it
// is decoded): each element is found by tracking strings and nesting, then
// read by parseStep. Nothing is allocated, however long the list.
func (s *stepPhases) UnmarshalJSON(b []byte) error {
	s.n = 0
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil
	}
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return errStepsNotList
	}
	depth, start, inString, escaped := 0, 1, false, false
	for i := 1; i < len(b)-1; i++ {
		switch c := b[i]; {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 0:
			s.add(b[start:i])
			start = i + 1
		}
	}
	s.add(b[start : len(b)-1])
	return nil
}

// errStepsNotList fails the decode of a result.json whose "steps" is not a
// list (nor null).
var errStepsNotList = errors.New(`result.json: "steps" is not a list`)

// add keeps the step elem (one element of the list, maybe empty: "[]")
// when it is a well-formed step with a known name: a later report of a
// name already kept replaces its duration; a new one is kept while there
// is room.
func (s *stepPhases) add(elem []byte) {
	name, ns, ok := parseStep(elem)
	if !ok || ns < 0 {
		return
	}
	phase, known := childSteps[string(name)]
	if !known {
		return
	}
	for i := range s.n {
		if s.p[i].Name == phase {
			s.p[i].Took = time.Duration(ns)
			return
		}
	}
	if s.n < maxChildSteps {
		s.p[s.n] = Phase{Name: phase, Took: time.Duration(ns)}
		s.n++
	}
}

// parseStep reads one step, ["name", ns], without the reflection of a JSON
// decode: b is a value the JSON decoder has already checked. A name with
// an escape or a number that is not an integer is not a step (a step name
// is plain [a-z0-9_+.-], see childSteps, and a duration whole
// nanoseconds). name is b's own memory.
func parseStep(b []byte) (name []byte, ns int64, ok bool) {
	b = bytes.TrimSpace(b)
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return nil, 0, false
	}
	q, num, found := bytes.Cut(b[1:len(b)-1], []byte{','})
	q, num = bytes.TrimSpace(q), bytes.TrimSpace(num)
	if !found || len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' || bytes.ContainsAny(q[1:len(q)-1], "\\\"") {
		return nil, 0, false
	}
	ns, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil {
		return nil, 0, false
	}
	return q[1 : len(q)-1], ns, true
}

// childSteps maps the names the agents time (agents/python/zygo_agent/child.py's and
// pool.py's _lap calls) to their phase names, child.NAME. The child runs the handler, so
// what it reports is its claim, not a measurement: a handler can append to the list or lie
// about a duration. Only these names are passed on, each once (its last report), so a
// handler can neither invent phases nor push the real ones out; a lie about a duration
// reaches only the handler's own caller, who receives whatever the handler returns anyway.
// Each name is a short token fit for a Server-Timing metric name: 1 to 32 of
// [a-z0-9_+.-].
var childSteps = func() map[string]string {
	m := map[string]string{}
	for _, name := range []string{
		"pre.fdreset", "pre.privatise", "pre.reseed", "pre.textio",
		"pre.rehearse", "close_socket", "stdio", "fdreset",
		"privatise", "reseed", "tmpdir", "dumpable", "landlock",
		"atexit_clear", "strict", "step", "event", "handler",
		"encode", "atexit+flush", "script.confine", "script.import",
	} {
		m[name] = "child." + name
	}
	return m
}()

// Run serves one request on a child and returns as soon as its outcome is
// known: when the child has renamed result.json into place (its last act
// before exiting) or has exited or been killed. Releasing the child's
// resources (waiting for its exit, the BeforeGo hook's after, removing the
// request directory) may finish in the background; Drain waits for it. The
// error is non-nil only when the request could not be started (zygote not
// ready: errdefs.ErrUnavailable); everything that happens to a started
// request is reported in Result.Failure.
func (z *Process) Run(ctx context.Context, req Request) (*Result, error) {
	z.mu.Lock()
	if z.state != StateReady {
		st := z.state
		z.mu.Unlock()
		return nil, fmt.Errorf("%w: zygote is %s", errdefs.ErrUnavailable, st)
	}
	if z.spec.Mode == ModeSpawn || z.spec.Mode == ModeWorker {
		_ = z.toLocked(StateDraining) // one request per spawned agent or worker (ready here)
	}
	z.inflight.Add(1)
	z.mu.Unlock()
	z.pool.started()

	t0 := time.Now()
	deadline := t0.Add(req.Timeout)
	res := &Result{lap: t0, gone: make(chan struct{})}
	res.Phases = res.phaseBuf[:0]
	dir, err := z.makeRequestDir(req)
	if err != nil {
		_ = dir.remove(context.Background())
		z.pool.finished()
		z.inflight.Done()
		z.log.Warn("making a request dir", "request_id", req.ID, "err", err)
		return nil, requestDirError(err)
	}
	res.mark("dir", &res.lap)
	finish, exiting := z.runChild(ctx, req, deadline, dir, res)
	// Bounded reads of regular files only (reqdir.go): they cannot block, and
	// a caller that went away must not cost the request its logs.
	rctx := context.WithoutCancel(ctx)
	res.Stdout = readLines(rctx, dir.files, "stdout", req.Redact)
	res.Stderr = readLines(rctx, dir.files, "stderr", req.Redact)
	res.mark("collect", &res.lap)
	res.Elapsed = time.Since(t0)
	// A child that could not make its own files (stdout, result.json) because the request
	// tmpfs filled between the supervisor's writes and the child's ends without a result:
	// that is the tmpfs's 503, as when the supervisor's own writes fail, not a crash.
	var full error
	if res.noResult && z.root.Full() {
		full = requestDirError(unix.ENOSPC)
		z.log.Warn("a request ended without a result while the request tmpfs was full", "request_id", req.ID)
	} else if res.dirErr != nil {
		full = requestDirError(res.dirErr)
		z.log.Warn("writing a request's event.json", "request_id", req.ID, "err", res.dirErr)
	}
	release := func() {
		defer z.inflight.Done()
		defer z.pool.finished()
		if finish != nil {
			finish()
		}
		close(res.gone)
		for _, f := range res.onGone {
			f()
		}
		if err := dir.remove(context.Background()); err != nil {
			z.log.Warn("removing request dir", "request_id", req.ID, "err", err)
		}
	}
	if exiting != nil {
		z.whenExited(exiting, deadline, release)
	} else {
		go release()
	}
	if full != nil {
		return nil, full
	}
	return res, nil
}

// requestDirError says why a request directory could not be made, naming
// the cause without a host path, as errdefs.ErrUnavailable (503): the
// request did not start, and a later one may succeed once the requests in
// flight, which hold the request tmpfs, have ended.
func requestDirError(err error) error {
	switch {
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return fmt.Errorf("%w: no room for the request's files: the zygote's request tmpfs (--run-tmpfs-mib) is full of the files of requests in flight", errdefs.ErrUnavailable)
	case errors.Is(err, unix.EMFILE), errors.Is(err, unix.ENFILE):
		return fmt.Errorf("%w: the daemon is out of file descriptors for the request's files", errdefs.ErrUnavailable)
	}
	return fmt.Errorf("%w: making the request directory failed", errdefs.ErrUnavailable)
}

// inlineEvent reports whether req's event travels in its go message (after the
// JSON, message.Event) rather than as event.json: a function's or a pool's
// request (a pool's go also carries the script's names, a few hundred bytes)
// of at most maxInlineEvent bytes, to a Python agent (a Node worker's stream
// channel carries JSON lines only). An empty event (the API sends {} for an
// empty body) would keep the file: event_bytes is at least 1.
func (z *Process) inlineEvent(req Request) bool {
	return z.spec.Mode != ModeWorker && len(req.Event) > 0 && len(req.Event) <= maxInlineEvent
}

// eventOwner is the owner the request directory's files are made with: the
// sandbox's host uid, or -1 (the daemon's own) when that is root.
func (z *Process) eventOwner() int {
	if uid := int(z.spec.Box.HostUID); uid != 0 {
		return uid
	}
	return -1
}

// sendGo sends m, the go message, on ch with attach. When m carries the event
// inline and the socket refuses a datagram that long (EMSGSIZE: its send
// buffer, net.core.wmem_default, is smaller than the datagram, which a host
// may set), the event is written to files as event.json (mode 0400, owned by
// owner, as makeRequestDir writes it) and go is sent again without it: the
// request is served as a larger event's is. Other errors are the send's.
func sendGo(ch channel, files *untrusted.Dir, owner int, m message, attach *os.File) error {
	err := ch.send(m, attach)
	if len(m.Event) == 0 || !errors.Is(err, unix.EMSGSIZE) {
		return err
	}
	if werr := files.WriteFileAs("event.json", m.Event, 0o400, owner, owner); werr != nil {
		return &eventFileError{send: err, write: werr}
	}
	m.EventBytes, m.Event = 0, nil
	return ch.send(m, attach)
}

// eventFileError is sendGo's failure to write event.json once the socket
// refused the datagram: the request directory's trouble (requestDirError: a
// 503, as when makeRequestDir cannot write it), not the child's.
type eventFileError struct{ send, write error }

func (e *eventFileError) Error() string {
	return fmt.Sprintf("%v; writing event.json instead: %v", e.send, e.write)
}
func (e *eventFileError) Unwrap() []error { return []error{e.send, e.write} }

// makeRequestDir takes a request directory (see reqdir.go) and writes
// event.json unless the event is inline (inlineEvent), and strict.bpf for a
// strict request, into it, mode 0400,
// owned by the sandbox's host uid. On error the returned directory is open
// (when it could be) for the caller to remove.
func (z *Process) makeRequestDir(req Request) (requestDir, error) {
	d, err := z.takeDir()
	if err != nil {
		return d, err
	}
	files := map[string][]byte{}
	if !z.inlineEvent(req) {
		files["event.json"] = req.Event
	}
	if req.Strict {
		if len(z.spec.StrictFilter) == 0 {
			return d, fmt.Errorf("strict request but no strict filter configured")
		}
		files["strict.bpf"] = z.spec.StrictFilter
	}
	if s := req.Script; s != nil && s.Mount == nil {
		if err := writeScript(d.files, s.Files, int(z.spec.Box.HostUID)); err != nil {
			return d, err
		}
	}
	owner := z.eventOwner()
	for name, data := range files {
		if err := d.files.WriteFileAs(name, data, 0o400, owner, owner); err != nil {
			return d, fmt.Errorf("writing %s: %w", name, err)
		}
	}
	return d, nil
}

// takeDir returns an open, empty request directory: one made (and opened)
// ahead of demand when a pre-forked pool keeps some ready, else a new one. Its name
// is a fresh 128-bit token that only the supervisor knows until GO.
func (z *Process) takeDir() (requestDir, error) {
	var d requestDir
	select {
	case d = <-z.dirs:
	default:
		var err error
		if d, err = z.newDir(); err != nil {
			return d, err
		}
	}
	return d, nil
}

// runChild does steps 1–8 of docs/protocol.md for one request and fills
// res.Failure, res.Error and res.Value. It returns what is left to do once
// the caller has read the request's output (wait for the exit, release the
// child), or nil; and, for a fork zygote's child whose result is in and
// which is exiting, the child: finish is then only its release, to run
// once its exit is reported (whenExited).
func (z *Process) runChild(ctx context.Context, req Request, deadline time.Time, dir requestDir, res *Result) (finish func(), exiting *child) {
	fail := func(f Failure, format string, a ...any) {
		res.Failure = f
		res.Error = &HandlerError{Type: string(f), Message: fmt.Sprintf(format, a...)}
	}
	watch := z.watcher.watch(dir.host)
	c, ok := z.newChild(ctx, fail)
	if !ok {
		watch.Close()
		return nil, nil
	}
	res.HostPID, res.Child = c.hostPID, c.kind
	res.mark("fork+hello", &res.lap)
	// settle runs once the outcome is known: the hooks' afters (secret files,
	// limit reclassification) must not wait for the child's exit.
	after, err := prepare(ctx, req, c)
	settle := func() {
		watch.Close()
		after(res)
	}
	if err != nil {
		z.pool.wake() // the child taken is not replaced until the filler hears of it
		_ = unix.PidfdSendSignal(c.pidfd, unix.SIGKILL, nil, 0)
		fail(FailInternal, "preparing child: %v", err)
		z.awaitExit(c, time.Now().Add(5*time.Second), nil)
		settle()
		z.release(c)
		return nil, nil
	}
	if z.pool != nil {
		z.restorePriority(c) // from the pool's background priority to the daemon's
	}
	res.mark("before_go", &res.lap)
	// deadline_ms is the time left, milliseconds, counted by the child from
	// when it receives GO (the sandbox's clock need not agree with ours).
	goMsg := message{Type: "go", RequestID: req.ID, Dir: dir.sandbox, DeadlineMs: max(time.Until(deadline).Milliseconds(), 0),
		Function: req.Function, Version: req.Version, Strict: req.Strict}
	if z.inlineEvent(req) {
		goMsg.EventBytes, goMsg.Event = len(req.Event), req.Event
	}
	var attach *os.File
	if s := req.Script; s != nil {
		goMsg.Script = &goScript{Tenant: s.Tenant, Hash: s.Hash, Entry: s.Entry, Mounted: s.Mount != nil, Shared: s.Shared}
		attach = s.Mount
	}
	if z.spec.Mode != ModeFork {
		z.current.Store(&outputOwner{id: req.ID, redact: req.Redact})
	}
	err = sendGo(c.conn, dir.files, z.eventOwner(), goMsg, attach)
	z.pool.wake() // the refill of the child taken, after its GO (pool.take)
	res.mark("go", &res.lap)
	if err != nil {
		_ = unix.PidfdSendSignal(c.pidfd, unix.SIGKILL, nil, 0)
		if efe := (*eventFileError)(nil); errors.As(err, &efe) {
			res.dirErr = efe.write
			fail(FailInternal, "%v", err)
		} else {
			fail(FailCrashed, "child went away before GO: %v", err)
		}
		settle()
		z.release(c)
		return nil, nil
	}
	if c.ownConn {
		c.conn.close()
		c.conn = nil
	}
	st := z.awaitExit(c, deadline, watch.ready)
	res.mark("wait", &res.lap)
	z.outcome(context.WithoutCancel(ctx), req, st, dir, res)
	res.mark("result", &res.lap)
	settle()
	res.mark("settle", &res.lap)
	res.Phases = append(res.Phases, res.steps...)
	if !st.resultReady {
		z.release(c)
		return nil, nil
	}
	if res.Failure == FailCrashed {
		// Something other than a result was renamed onto result.json: the
		// child is not exiting on its own; end it now.
		_ = unix.PidfdSendSignal(c.pidfd, unix.SIGKILL, nil, 0)
	}
	// The result is in; the child is exiting. Wait for that off the
	// request path, killing it if it lingers past the deadline.
	if z.spec.Mode == ModeFork {
		return func() { z.release(c) }, c
	}
	return func() {
		z.awaitExit(c, time.Now().Add(max(time.Until(deadline), 0)+2*time.Second), nil)
		z.release(c)
	}, nil
}

// prepare readies c for GO: the Begin of what Spec.Hold readied for it (a
// child from the pool), then the request's BeforeGo. It returns their
// afters as one, which the caller runs once the outcome is known, also
// after an error.
func prepare(ctx context.Context, req Request, c *child) (after func(*Result), err error) {
	var afters []func(*Result)
	after = func(res *Result) {
		for i := len(afters) - 1; i >= 0; i-- {
			afters[i](res)
		}
	}
	held := c.held != nil
	if held {
		h := c.held
		c.held = nil
		a, err := h.Begin(ctx, req.ID)
		if err != nil {
			return after, err
		}
		if a != nil {
			afters = append(afters, a)
		}
	}
	if req.BeforeGo != nil {
		a, err := req.BeforeGo(ctx, c.hostPID, held)
		if a != nil {
			afters = append(afters, a)
		}
		if err != nil {
			return after, err
		}
	}
	return after, nil
}

// outcome turns how the child ended into res's Failure, Error and Value.
func (z *Process) outcome(ctx context.Context, req Request, st exitStatus, dir requestDir, res *Result) {
	switch {
	case st.timedOut:
		res.Failure = FailTimeout
		res.Error = &HandlerError{Type: "Timeout", Message: fmt.Sprintf("timeout: request exceeded timeout_ms=%d and was killed", req.Timeout.Milliseconds())}
		return
	case st.zygoteDied:
		res.Failure = FailZygote
		res.Error = &HandlerError{Type: "ZygoteDied", Message: fmt.Sprintf("the function's zygote died during the request: %v", z.exitErr)}
		return
	}
	rf, err := readResult(ctx, dir.files, req.MaxResponseBytes)
	if err == nil {
		res.steps = rf.Steps.phases()
	}
	switch {
	case errors.Is(err, errdefs.ErrTooLarge):
		res.Failure = FailResponseLarge
		res.Error = &HandlerError{Type: "ResponseTooLarge", Message: err.Error()}
	case errors.Is(err, errNotItsResult):
		res.Failure = FailCrashed
		res.Error = &HandlerError{Type: "Crashed", Message: err.Error()}
	case err != nil:
		res.Failure = FailCrashed
		res.noResult = errors.Is(err, os.ErrNotExist)
		msg := "child exited without a result"
		if st.signal != 0 {
			msg = "child killed by signal " + signalName(st.signal)
		} else if st.code != 0 {
			msg = fmt.Sprintf("child exited with status %d without a result", st.code)
		}
		res.Error = &HandlerError{Type: "Crashed", Message: msg}
	case !rf.OK && rf.Rejected == "event":
		res.Failure = FailBadEvent
		res.Error = rf.Error
		if res.Error == nil {
			res.Error = &HandlerError{Type: "EventRejected", Message: "event: the runtime's JSON parser refused it"}
		}
	case !rf.OK:
		res.Failure = FailHandler
		res.Error = rf.Error
		if res.Error == nil {
			res.Error = &HandlerError{Type: "Error", Message: "handler failed"}
		}
	default:
		res.Value = json.RawMessage(rf.Value)
	}
}

type exitStatus struct {
	code, signal         int
	timedOut, zygoteDied bool
	resultReady          bool // result.json appeared; the child may still be exiting
}

// awaitExit waits until result (if not nil) is closed, or the child's exit
// is reported (fork mode: the zygote's exited message; spawn and worker
// mode: the agent process's exit), killing the child through its pidfd at
// deadline.
func (z *Process) awaitExit(c *child, deadline time.Time, result <-chan struct{}) exitStatus {
	var st exitStatus
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-result:
		st.resultReady = true
	case m := <-c.exitCh:
		if m.Code != nil {
			st.code = *m.Code
		}
		st.signal = m.Signal
	case <-z.done:
		if z.spec.Mode == ModeSpawn || z.spec.Mode == ModeWorker {
			// The agent process was the child.
			code := z.cmd.ProcessState.ExitCode()
			if code > 128 {
				st.signal = code - 128
			} else {
				st.code = code
			}
			return st
		}
		st.zygoteDied = true
	case <-timer.C:
		st.timedOut = true
		_ = unix.PidfdSendSignal(c.pidfd, unix.SIGKILL, nil, 0)
		// Wait (bounded) for the exit so the request dir is not removed
		// under a live child.
		select {
		case <-c.exitCh:
		case <-z.done:
		case <-time.After(5 * time.Second):
		}
	}
	return st
}
