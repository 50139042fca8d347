package guest

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/zygo-run/zygo/agents"
)

//go:embed interp.py
var interpPy string

// interpSource is the program the interpreter runs: the one reseed module
// (agents.ReseedCorePy) as the Python string _RESEED_SOURCE, which interp.py loads as a
// module, then interp.py. strconv.Quote's escapes are all valid in a Python string literal.
var interpSource = "_RESEED_SOURCE = " + strconv.Quote(agents.ReseedCorePy) + "\n" + interpPy

// Bounds of one run-code call (docs/sandboxes.md, "Code interpreter").
const (
	// MaxCodeOutputBytes bounds what one call streams, stdout and stderr together, in bytes.
	// Beyond it the output is cut (at a UTF-8 boundary), OutputTruncatedMarker is sent on
	// stderr, CodeResult.OutputTruncated is set, and the rest is discarded while the code keeps
	// running (a timeout still stops it).
	MaxCodeOutputBytes = 16 << 20
	// MaxCodeValueBytes bounds CodeResult.Value and CodeResult.Error, each, in UTF-8 bytes; a
	// longer one is cut and ends with "[zygo: value truncated …]".
	MaxCodeValueBytes = 1 << 20
	// InterruptGrace is how long code has to stop after the KeyboardInterrupt a timeout (or a
	// caller that went away) raises. Code still running then (it caught the interrupt, or is
	// blocked in C code) is killed with the interpreter's whole process group; the call answers
	// with CodeResult.Restarted and the next call starts a fresh interpreter.
	InterruptGrace = 2 * time.Second
	// maxEventLine bounds one line on the interpreter's event pipe. interp.py keeps its lines
	// far below it (output in 64 Ki-character chunks, values cut at MaxCodeValueBytes); a longer
	// line (code writing to fd 4 itself) is discarded, never a reason to stop reading.
	maxEventLine = 8 << 20
)

// OutputTruncatedMarker is the line sent on stderr where a call's output was cut.
var OutputTruncatedMarker = fmt.Sprintf("\n[zygo: output truncated: this call wrote more than %d MiB; the rest was discarded, the code kept running]\n", MaxCodeOutputBytes>>20)

// interp is the persistent Python process behind run-code. It is started on first use and
// lives as long as the sandbox; its globals are part of every checkpoint. One call runs at a
// time (later calls wait, bounded by their ctx). A call whose ctx ends interrupts the running
// code with SIGINT; code that has not stopped InterruptGrace later is SIGKILLed with its
// process group, and the next call starts a fresh interpreter.
type interp struct {
	python string
	env    func() []string
	reaper *reaper
	log    *slog.Logger
	grace  time.Duration // InterruptGrace; shorter in tests

	busy chan struct{} // holds one token while a call is in the interpreter

	mu     sync.Mutex // guards the fields below and every interpProc's guarded fields
	cur    *interpProc
	nextID int64
	reseed string // hex seed to apply before the next code; "" when none is pending
	// dropped counts the bytes the interpreter's processes wrote to fds 1 and 2 while no
	// call was there to take them (interp_stdio.go); logged and reset at the next call.
	dropped int64
}

// interpProc is one interpreter process. A killed or exited one is never reused.
type interpProc struct {
	proc *os.Process
	pid  int      // also its process group id
	cmdW *os.File // commands; written only by the call holding interp.busy
	// stdio are the read ends of its fds 1 and 2 (stdout, stderr), read by pumpStdio.
	stdio []*stdioPipe

	waiters map[int64]*codeWaiter // guarded by interp.mu; nil once the process is gone
	// active is the call that output on fds 1 and 2 goes to, or nil (guarded by interp.mu;
	// set by submit, cleared by endCall).
	active *codeWaiter
	exited bool   // guarded by interp.mu
	killed string // guarded by interp.mu: why the agent killed it, or ""
}

// codeWaiter receives the events of one call.
type codeWaiter struct {
	ch   chan interpEvent // output events, then the Done one
	gone chan struct{}    // closed when the caller stops reading: events are dropped
	fin  chan struct{}    // closed once the Done event was handed over or dropped
}

// deliver hands ev to the call, or drops it if the caller left; it never blocks on a caller
// that is gone, so the event pipe is always read. It returns false when ev was dropped.
func (w *codeWaiter) deliver(ev interpEvent) bool {
	ok := false
	select {
	case w.ch <- ev:
		ok = true
	case <-w.gone:
	}
	if ev.Done {
		close(w.fin)
	}
	return ok
}

type interpEvent struct {
	ID     int64  `json:"id"`
	Stream string `json:"stream"`
	Data   string `json:"data"`
	Done   bool   `json:"done"`
	OK     bool   `json:"ok"`
	Value  string `json:"value"`
	Error  string `json:"error"`
	// restarted is set by the agent (never by the interpreter) when the process died under the call.
	restarted bool
}

// setReseed makes the interpreter reseed its generators before it runs the next code.
func (in *interp) setReseed(seed []byte) {
	in.mu.Lock()
	in.reseed = hex.EncodeToString(seed)
	in.mu.Unlock()
}

// startLocked starts a Python process in its own process group. Its fd 0 is /dev/null, fds 1
// and 2 are pipes to the agent (interp_stdio.go), fd 3 reads commands, fd 4 writes events.
func (in *interp) startLocked() error {
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		return err
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		cmdR.Close()
		cmdW.Close()
		return err
	}
	stdio, stdioW, err := newStdioPipes()
	if err != nil {
		for _, f := range []*os.File{cmdR, cmdW, evR, evW} {
			f.Close()
		}
		return err
	}
	cmd := exec.Command(in.python, "-I", "-u", "-c", interpSource)
	cmd.Env = in.env()
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = stdioW[0], stdioW[1]
	cmd.ExtraFiles = []*os.File{cmdR, evW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	done, err := in.reaper.start(cmd)
	for _, f := range append(stdioW, cmdR, evW) {
		f.Close()
	}
	if err != nil {
		for _, f := range []*os.File{cmdW, evR, stdio[0].f, stdio[1].f} {
			f.Close()
		}
		return fmt.Errorf("starting %s: %w", in.python, err)
	}
	p := &interpProc{proc: cmd.Process, pid: cmd.Process.Pid, cmdW: cmdW, stdio: stdio, waiters: make(map[int64]*codeWaiter)}
	in.cur = p
	for _, sp := range stdio {
		go in.pumpStdio(p, sp)
	}
	readerDone := make(chan struct{})
	go in.readEvents(p, evR, readerDone)
	go in.watch(p, evR, done, readerDone)
	return nil
}

// readEvents dispatches p's events to waiting calls until the event pipe ends (EOF, or the
// read deadline watch sets once the process exited).
func (in *interp) readEvents(p *interpProc, evR *os.File, readerDone chan<- struct{}) {
	defer close(readerDone)
	br := bufio.NewReaderSize(evR, 64<<10)
	var buf []byte
	for {
		line, tooLong, err := readBoundedLine(br, maxEventLine, buf[:0])
		buf = line
		if err != nil {
			return
		}
		var ev interpEvent
		if tooLong || json.Unmarshal(line, &ev) != nil {
			continue
		}
		in.mu.Lock()
		w := p.waiters[ev.ID]
		if ev.Done && w != nil {
			delete(p.waiters, ev.ID)
		}
		in.mu.Unlock()
		if w == nil {
			continue
		}
		if ev.Done {
			in.endCall(p, w) // the output of fds 1 and 2 first
		}
		w.deliver(ev)
	}
}

// readBoundedLine reads one '\n'-terminated line into buf and returns it. A line longer than
// max is read to its end but not kept (tooLong); the memory used stays below max.
func readBoundedLine(br *bufio.Reader, max int, buf []byte) (line []byte, tooLong bool, err error) {
	for {
		frag, err := br.ReadSlice('\n')
		if !tooLong && len(buf)+len(frag) <= max {
			buf = append(buf, frag...)
		} else {
			tooLong, buf = true, buf[:0]
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return buf, tooLong, err
	}
}

// watch waits for p to exit, lets its last events drain (drainGrace: a process it left behind
// may hold the pipe), then fails every call still waiting on it and forgets it, so that the
// next call starts a fresh interpreter.
func (in *interp) watch(p *interpProc, evR *os.File, done <-chan syscall.WaitStatus, readerDone <-chan struct{}) {
	ws := <-done
	_ = evR.SetReadDeadline(time.Now().Add(drainGrace))
	<-readerDone
	evR.Close()
	p.cmdW.Close()
	p.proc.Release()
	in.mu.Lock()
	active := p.active
	in.mu.Unlock()
	if active != nil {
		in.endCall(p, active)
	}
	// A process the code left behind may still hold fds 1 and 2: it gets EPIPE from now on.
	for _, sp := range p.stdio {
		sp.f.Close()
	}
	in.mu.Lock()
	p.exited = true
	if in.cur == p {
		in.cur = nil
	}
	why := p.killed
	if why == "" {
		st := exitStatus(ws)
		why = fmt.Sprintf("the interpreter exited (code %d)", st.Code)
		if st.Signal != 0 {
			why = fmt.Sprintf("the interpreter was killed by signal %d", st.Signal)
		}
	}
	waiters := p.waiters
	p.waiters = nil
	in.mu.Unlock()
	msg := "interpreter restarted: " + why + "; its variables are lost and the next call starts a fresh interpreter"
	for id, w := range waiters {
		w.deliver(interpEvent{ID: id, Done: true, Error: msg, restarted: true})
	}
}

// interrupt sends SIGINT to p's process group (KeyboardInterrupt in the running code) and, if
// the call has not finished InterruptGrace later, kills the interpreter. why says what ended
// the call ("run-code timed out after 500ms").
func (in *interp) interrupt(p *interpProc, w *codeWaiter, why string) {
	in.mu.Lock()
	gone := p.exited
	in.mu.Unlock()
	if gone {
		return
	}
	_ = syscall.Kill(-p.pid, syscall.SIGINT)
	go func() {
		t := time.NewTimer(in.grace)
		defer t.Stop()
		select {
		case <-w.fin:
		case <-t.C:
			in.kill(p, fmt.Sprintf("%s and the code did not stop within %v of KeyboardInterrupt, so the interpreter was killed", why, in.grace))
		}
	}()
}

// kill SIGKILLs p's process group and detaches p, so the next call starts a new interpreter.
// The calls waiting on p are answered by watch once p is gone, with why.
func (in *interp) kill(p *interpProc, why string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if p.exited {
		return
	}
	if p.killed == "" {
		p.killed = why
	}
	if in.cur == p {
		in.cur = nil
	}
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
}

// submit starts the interpreter if there is none and sends it code. The caller holds in.busy.
func (in *interp) submit(code string) (*interpProc, *codeWaiter, error) {
	in.mu.Lock()
	if in.cur == nil {
		if err := in.startLocked(); err != nil {
			in.mu.Unlock()
			return nil, nil, err
		}
	}
	p := in.cur
	in.nextID++
	id := in.nextID
	w := &codeWaiter{ch: make(chan interpEvent, 64), gone: make(chan struct{}), fin: make(chan struct{})}
	p.waiters[id] = w
	p.active = w
	if in.dropped > 0 {
		in.log.Info("run-code: output the interpreter wrote to fds 1 and 2 between calls was dropped", "bytes", in.dropped)
		in.dropped = 0
	}
	b, _ := json.Marshal(map[string]any{"id": id, "code": code, "reseed": in.reseed,
		"max_output": MaxCodeOutputBytes, "max_value": MaxCodeValueBytes})
	in.reseed = ""
	in.mu.Unlock()
	// Outside in.mu: a long code line may take a while to be read, and the event reader needs
	// the lock meanwhile. Python reads commands whenever no call runs, which holding busy means.
	if _, err := p.cmdW.Write(append(b, '\n')); err != nil {
		in.mu.Lock()
		if p.waiters != nil {
			delete(p.waiters, id)
		}
		in.mu.Unlock()
		in.kill(p, "its command pipe broke") // the next call starts a fresh one
		return nil, nil, fmt.Errorf("sending code to the interpreter: %w", err)
	}
	return p, w, nil
}

// run executes code, sending output events to ew (at most MaxCodeOutputBytes). It returns the
// result, or an error when the interpreter could not be reached or the caller left (ctx
// cancelled). When ctx's deadline passes the code is interrupted and the result says so.
func (in *interp) run(ctx context.Context, code string, ew *eventWriter) (CodeResult, error) {
	select {
	case in.busy <- struct{}{}:
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return CodeResult{Error: "timed out waiting for the interpreter: another run-code call was running; this code did not run"}, nil
		}
		return CodeResult{}, ctx.Err()
	}
	p, w, err := in.submit(code)
	if err != nil {
		<-in.busy
		return CodeResult{}, err
	}
	release := true
	defer func() {
		close(w.gone)
		if release {
			<-in.busy
		} else { // the caller left while the code runs: the next call waits for it to end
			go func() { <-w.fin; <-in.busy }()
		}
	}()
	out := outputCap{left: MaxCodeOutputBytes}
	start := time.Now()
	ctxDone := ctx.Done()
	interrupted := false
	for {
		select {
		case ev := <-w.ch:
			if !ev.Done {
				out.send(ew, ev)
				continue
			}
			res := CodeResult{OK: ev.OK, Value: ev.Value, Error: ev.Error, Restarted: ev.restarted, OutputTruncated: out.truncated}
			if interrupted && !ev.OK && !ev.restarted {
				res.Error = "timed out: " + res.Error
			}
			return res, nil
		case <-ctxDone:
			ctxDone, interrupted = nil, true
			why := fmt.Sprintf("run-code timed out after %v", time.Since(start).Round(time.Millisecond))
			if errors.Is(ctx.Err(), context.Canceled) {
				why = "the caller went away"
			}
			in.interrupt(p, w, why)
			if errors.Is(ctx.Err(), context.Canceled) { // don't wait for the result
				release = false
				return CodeResult{}, ctx.Err()
			}
		}
	}
}

// outputCap passes on at most left bytes of one call's output, then the marker once.
type outputCap struct {
	left      int
	truncated bool
}

func (o *outputCap) send(ew *eventWriter, ev interpEvent) {
	if o.truncated {
		return
	}
	data := []byte(ev.Data)
	if len(data) > o.left {
		cut := o.left // back off to a rune start, so the last rune kept is whole
		for cut > 0 && o.left-cut < utf8.UTFMax && !utf8.RuneStart(data[cut]) {
			cut--
		}
		data, o.truncated = data[:cut], true
	}
	o.left -= len(data)
	if len(data) > 0 {
		ew.send(Event{Stream: ev.Stream, Data: data})
	}
	if o.truncated {
		ew.send(Event{Stream: "stderr", Data: []byte(OutputTruncatedMarker)})
	}
}

func (a *Agent) handleRunCode(w http.ResponseWriter, r *http.Request) {
	var req CodeRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "run-code needs a JSON body with code")
		return
	}
	ctx := r.Context()
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	ew := newEventWriter(w)
	res, err := a.interp.run(ctx, req.Code, ew)
	if err != nil {
		ew.send(Event{Error: err.Error()})
		return
	}
	ew.send(Event{Result: &res})
}
