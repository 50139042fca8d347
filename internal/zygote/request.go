package zygote

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/nsbox"
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
	// child's host pid (secrets, cgroup placement). An error kills the child
	// and fails the request; the hook undoes its own partial work. On
	// success, the returned after (if not nil) is called once the child has
	// exited, before the result is read: it may release resources and
	// reclassify the failure (a cgroup limit that killed the child).
	BeforeGo func(ctx context.Context, hostPID int) (after func(*Result), err error)
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
)

// Result is the outcome of Run.
type Result struct {
	Value   json.RawMessage // the handler's return value when Failure is FailNone
	Failure Failure
	Error   *HandlerError // details when Failure is not FailNone
	Stdout  []string      // lines the request printed
	Stderr  []string
	HostPID int
	Elapsed time.Duration
	lap     time.Time // start of the current phase

	// Phases records how long each step took, in order (for --debug and
	// benchmarks): dir, fork, hello, before_go, run (GO to exit), collect.
	Phases []Phase
}

// Phase is one timed step of a request.
type Phase struct {
	Name string        `json:"name"`
	Took time.Duration `json:"took_ns"`
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
	OK    bool            `json:"ok"`
	Value json.RawMessage `json:"value"`
	Error *HandlerError   `json:"error"`
}

// maxLogBytes bounds what one request's stdout or stderr keeps, bytes.
const maxLogBytes = 1 << 20

// Run serves one request on a new child and waits for it to end. The error
// is non-nil only when the request could not be started (zygote not ready:
// errdefs.ErrUnavailable); everything that happens to a started request is
// reported in Result.Failure.
func (z *Zygote) Run(ctx context.Context, req Request) (*Result, error) {
	z.mu.Lock()
	if z.state != StateReady {
		st := z.state
		z.mu.Unlock()
		return nil, fmt.Errorf("%w: zygote is %s", errdefs.ErrUnavailable, st)
	}
	if z.spec.Mode == ModeSpawn || z.spec.Mode == ModeWorker {
		z.state = StateDraining // one request per spawned agent or worker
	}
	z.nextSeq++
	seq := z.nextSeq
	forkCh, exitCh := make(chan message, 1), make(chan message, 1)
	z.forks[seq], z.exits[seq] = forkCh, exitCh
	z.inflight.Add(1)
	z.mu.Unlock()
	defer z.inflight.Done()
	defer func() {
		z.mu.Lock()
		delete(z.forks, seq)
		delete(z.exits, seq)
		z.mu.Unlock()
	}()

	t0 := time.Now()
	deadline := t0.Add(req.Timeout)
	res := &Result{}
	res.lap = t0
	dir, err := z.makeRequestDir(req)
	if err != nil {
		return nil, err
	}
	res.mark("dir", &res.lap)
	z.runChild(ctx, req, deadline, seq, dir, forkCh, exitCh, res)
	res.Stdout = readLines(filepath.Join(dir.host, "stdout"))
	res.Stderr = readLines(filepath.Join(dir.host, "stderr"))
	os.RemoveAll(dir.host)
	res.mark("collect", &res.lap)
	res.Elapsed = time.Since(t0)
	return res, nil
}

type requestDir struct {
	host, sandbox string
}

// makeRequestDir creates the request directory with an unguessable name,
// owned by the sandbox's host uid, mode 0700, with tmp/ and event.json.
func (z *Zygote) makeRequestDir(req Request) (requestDir, error) {
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return requestDir{}, err
	}
	name := hex.EncodeToString(tok[:])
	d := requestDir{host: filepath.Join(z.reqRoot, name), sandbox: nsbox.ReqDir + "/" + name}
	uid := int(z.spec.Box.HostUID)
	if err := os.Mkdir(d.host, 0o700); err != nil {
		return d, fmt.Errorf("creating request dir: %w", err)
	}
	if err := os.Mkdir(filepath.Join(d.host, "tmp"), 0o700); err != nil {
		return d, fmt.Errorf("creating request tmp: %w", err)
	}
	if err := os.WriteFile(filepath.Join(d.host, "event.json"), req.Event, 0o400); err != nil {
		return d, fmt.Errorf("writing event: %w", err)
	}
	owned := []string{d.host, filepath.Join(d.host, "tmp"), filepath.Join(d.host, "event.json")}
	if req.Strict {
		if len(z.spec.StrictFilter) == 0 {
			return d, fmt.Errorf("strict request but no strict filter configured")
		}
		p := filepath.Join(d.host, "strict.bpf")
		if err := os.WriteFile(p, z.spec.StrictFilter, 0o400); err != nil {
			return d, fmt.Errorf("writing strict filter: %w", err)
		}
		owned = append(owned, p)
	}
	if uid != 0 {
		for _, p := range owned {
			if err := os.Chown(p, uid, uid); err != nil {
				return d, fmt.Errorf("chowning request dir: %w", err)
			}
		}
	}
	return d, nil
}

// runChild does steps 1–8 of docs/protocol.md for one request and fills
// res.Failure, res.Error and res.Value.
func (z *Zygote) runChild(ctx context.Context, req Request, deadline time.Time, seq int, dir requestDir,
	forkCh, exitCh chan message, res *Result) {
	fail := func(f Failure, format string, a ...any) {
		res.Failure = f
		res.Error = &HandlerError{Type: string(f), Message: fmt.Sprintf(format, a...)}
	}
	var goCh channel // where GO is sent: the request socket, or a worker's control channel
	var hostPID, pidfd int
	var ok bool
	if z.spec.Mode == ModeWorker {
		hostPID, pidfd, ok = z.workerChild(fail)
		goCh = z.ctl
	} else {
		var local *net.UnixConn
		local, hostPID, pidfd, ok = z.newChild(ctx, seq, forkCh, fail)
		if local != nil {
			defer local.Close()
			goCh = packetChannel{c: local}
		}
	}
	if !ok {
		return
	}
	defer unix.Close(pidfd)
	res.HostPID = hostPID
	res.mark("fork+hello", &res.lap)
	if req.BeforeGo != nil {
		after, err := req.BeforeGo(ctx, hostPID)
		if after != nil {
			defer after(res)
		}
		if err != nil {
			_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
			fail(FailInternal, "preparing child: %v", err)
			z.awaitExit(exitCh, pidfd, time.Now().Add(5*time.Second))
			return
		}
	}
	res.mark("before_go", &res.lap)
	goMsg := message{Type: "go", RequestID: req.ID, Dir: dir.sandbox, DeadlineMs: deadline.UnixMilli(),
		Function: req.Function, Version: req.Version, Strict: req.Strict}
	if err := goCh.send(goMsg, nil); err != nil {
		_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		fail(FailCrashed, "child went away before GO: %v", err)
		return
	}
	if z.spec.Mode != ModeWorker {
		goCh.close()
	}
	z.finish(req, deadline, dir, exitCh, pidfd, res)
	res.mark("run", &res.lap)
}

// newChild asks the agent for a child (fork mode: a fork of the zygote;
// spawn mode: the agent process itself) and waits for its hello. It
// returns the supervisor's end of the request socket and a pidfd, both
// owned by the caller.
func (z *Zygote) newChild(ctx context.Context, seq int, forkCh chan message,
	fail func(Failure, string, ...any)) (*net.UnixConn, int, int, bool) {
	local, remote, err := seqpacketPair()
	if err != nil {
		fail(FailInternal, "%v", err)
		return nil, 0, 0, false
	}
	if err := setPassCred(local); err != nil {
		remote.Close()
		fail(FailInternal, "setting SO_PASSCRED: %v", err)
		return local, 0, 0, false
	}
	kind := "fork"
	if z.spec.Mode == ModeSpawn {
		kind = "run"
	}
	z.sendMu.Lock()
	err = z.ctl.send(message{Type: kind, Seq: seq}, remote)
	z.sendMu.Unlock()
	remote.Close()
	if err != nil {
		fail(FailZygote, "zygote unavailable: %v", err)
		return local, 0, 0, false
	}
	if z.spec.Mode == ModeFork && !z.awaitForked(ctx, forkCh, fail) {
		return local, 0, 0, false
	}
	hostPID, pidfd, ok := z.awaitHello(local, fail)
	return local, hostPID, pidfd, ok
}

// workerChild returns a Node worker's host pid (from its ready message's
// credentials) and a pidfd for it.
func (z *Zygote) workerChild(fail func(Failure, string, ...any)) (int, int, bool) {
	pid := z.Ready().HostPID
	if pid == 0 {
		fail(FailInternal, "worker's host pid is unknown")
		return 0, 0, false
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		fail(FailCrashed, "worker %d vanished: %v", pid, err)
		return 0, 0, false
	}
	return pid, pidfd, true
}

func (z *Zygote) awaitForked(ctx context.Context, forkCh chan message, fail func(Failure, string, ...any)) bool {
	select {
	case m := <-forkCh:
		if m.Type == "fork_error" {
			fail(FailZygote, "zygote could not fork: %s", string(m.Error))
			return false
		}
		return true
	case <-z.done:
		fail(FailZygote, "zygote died before forking: %v", z.exitErr)
	case <-ctx.Done():
		fail(FailInternal, "request cancelled: %v", ctx.Err())
	case <-time.After(10 * time.Second):
		fail(FailZygote, "zygote did not fork within 10s")
	}
	return false
}

// awaitHello reads the child's hello, whose SCM_CREDENTIALS give its host
// pid, and opens a pidfd for it (owned by the caller).
func (z *Zygote) awaitHello(local *net.UnixConn, fail func(Failure, string, ...any)) (int, int, bool) {
	_ = local.SetReadDeadline(time.Now().Add(10 * time.Second))
	m, creds, err := recv(local)
	if err != nil || m.Type != "hello" || creds == nil {
		select {
		case <-z.done:
			fail(FailZygote, "zygote died: %v", z.exitErr)
		default:
			fail(FailCrashed, "child did not say hello: %v", err)
		}
		return 0, 0, false
	}
	pidfd, err := unix.PidfdOpen(int(creds.Pid), 0)
	if err != nil {
		fail(FailCrashed, "child %d vanished: %v", creds.Pid, err)
		return 0, 0, false
	}
	return int(creds.Pid), pidfd, true
}

// finish waits for the child to exit (killing it at the deadline) and
// reads its result.
func (z *Zygote) finish(req Request, deadline time.Time, dir requestDir, exitCh chan message, pidfd int, res *Result) {
	st := z.awaitExit(exitCh, pidfd, deadline)
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
	rf, err := readResult(filepath.Join(dir.host, "result.json"), req.MaxResponseBytes)
	switch {
	case errors.Is(err, errdefs.ErrTooLarge):
		res.Failure = FailResponseLarge
		res.Error = &HandlerError{Type: "ResponseTooLarge", Message: err.Error()}
	case err != nil:
		res.Failure = FailCrashed
		msg := "child exited without a result"
		if st.signal != 0 {
			msg = "child killed by signal " + signalName(st.signal)
		} else if st.code != 0 {
			msg = fmt.Sprintf("child exited with status %d without a result", st.code)
		}
		res.Error = &HandlerError{Type: "Crashed", Message: msg}
	case !rf.OK:
		res.Failure = FailHandler
		res.Error = rf.Error
		if res.Error == nil {
			res.Error = &HandlerError{Type: "Error", Message: "handler failed"}
		}
	default:
		res.Value = rf.Value
	}
}

type exitStatus struct {
	code, signal         int
	timedOut, zygoteDied bool
}

// awaitExit waits for the child's exit report (fork mode: the zygote's
// exited message; spawn mode: the agent process's exit), killing the child
// through its pidfd at deadline.
func (z *Zygote) awaitExit(exitCh chan message, pidfd int, deadline time.Time) exitStatus {
	var st exitStatus
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case m := <-exitCh:
			if m.Code != nil {
				st.code = *m.Code
			}
			st.signal = m.Signal
			return st
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
			return st
		case <-timer.C:
			st.timedOut = true
			_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
			// Wait (bounded) for the exit so the request dir is not removed
			// under a live child.
			select {
			case <-exitCh:
			case <-z.done:
			case <-time.After(5 * time.Second):
			}
			return st
		}
	}
}

func readResult(path string, max int64) (*resultFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if max <= 0 {
		max = 6 << 20
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: response exceeds max_response_kib=%d", errdefs.ErrTooLarge, max>>10)
	}
	var rf resultFile
	if err := json.Unmarshal(b, &rf); err != nil {
		return nil, fmt.Errorf("malformed result: %w", err)
	}
	return &rf, nil
}

func readLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(io.LimitReader(f, maxLogBytes))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		out = append(out, string(bytes.ToValidUTF8(sc.Bytes(), []byte("\uFFFD"))))
	}
	return out
}
