package guest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The process table (docs/sandboxes.md, "Processes").
//
// A process started through it outlives the request that started it: it is the agent's
// child, reaped by the reaper, and stays in the table until it exits. Its stdout and stderr
// are pipes that the agent always reads (a process never blocks on output nobody listens to);
// what it reads goes to the listeners connected at that moment (the request that started it,
// and every ConnectProcess) and is dropped when there are none: the agent keeps no output for
// later.
//
// Memory is bounded by backpressure, not by loss: each listener has a queue of at most
// listenerQueue chunks of at most 32 KiB, and the pipe's reader waits until every connected
// listener has room. A listener that reads slowly slows the process's output down (its writes
// block on the full pipe, as on a terminal); it never makes the agent buffer more. A
// listener is gone when its request ends (the host cancelled it, or the connection died), and
// then it holds nothing back.
//
// The table is in PID 1's memory, so it is in every checkpoint: a fork child or a rollback
// has the same processes, pids and tags, with their stdin pipes. The listeners are not: they
// are requests of a connection that a checkpoint cuts, so in every copy (and in the source,
// whose connection a checkpoint also cuts) the process has no listener until someone connects
// again. The daemon re-connects the streams of the source by itself (sandbox.Manager).

const (
	// listenerQueue bounds the chunks queued for one listener: with 32 KiB chunks, 2 MiB.
	listenerQueue = 64
	// endedKeep and maxEnded bound how long, and how many, ended processes are remembered for
	// a ConnectProcess that comes after the end (a stream re-connected after a checkpoint):
	// it gets the end event at once. They are not listed, and take no input or signal.
	endedKeep = time.Minute
	maxEnded  = 64
)

// errNoProcess is a selector that names no process of the table; it wraps fs.ErrNotExist.
type errNoProcess struct{ sel ProcessSelector }

func (e *errNoProcess) Error() string {
	if e.sel.Tag != "" {
		return fmt.Sprintf("tag %q: no running process has it", e.sel.Tag)
	}
	return fmt.Sprintf("pid %d: no such process in the sandbox's process table", e.sel.PID)
}
func (e *errNoProcess) Unwrap() error { return fs.ErrNotExist }

// errTagInUse is a start whose tag a running process has; it wraps fs.ErrExist.
type errTagInUse struct{ tag string }

func (e *errTagInUse) Error() string {
	return fmt.Sprintf("tag %q: a running process has it already", e.tag)
}
func (e *errTagInUse) Unwrap() error { return fs.ErrExist }

// errStdinClosed is an input to a process whose stdin is closed or was never kept open.
var errStdinClosed = errors.New("its stdin is closed (or was not kept open: start it with stdin)")

// procTable is the agent's table of started processes.
type procTable struct {
	reaper *reaper

	mu    sync.Mutex // guards byPID, byTag, ended
	byPID map[int]*proc
	byTag map[string]*proc
	ended map[int]*proc // ended processes, kept endedKeep for late connects
}

func newProcTable(r *reaper) *procTable {
	return &procTable{reaper: r, byPID: map[int]*proc{}, byTag: map[string]*proc{}, ended: map[int]*proc{}}
}

// proc is one process of the table.
type proc struct {
	pid  int
	info ProcessInfo

	// stdinSem serializes writes to stdin and its close; holds one token.
	stdinSem  chan struct{}
	stdin     *os.File // the write end; nil once closed (or when not kept open). Guarded by stdinSem.
	stdinFile *os.File // the write end as started, never changed (nil without stdin)

	mu        sync.Mutex // guards listeners, exited, exitedAt, end, endedAt
	listeners map[*listener]struct{}
	exited    bool // reaped: its pid may be another process's now
	exitedAt  time.Time
	end       *ProcessEvent // set once output is drained after the exit
	endedAt   time.Time
	done      chan struct{} // closed once end is set
}

// listener is one connected stream of a process.
type listener struct {
	ch   chan ProcessEvent // output chunks, at most listenerQueue
	gone chan struct{}     // closed when the stream's request ends
}

// lookup returns the running process sel names, or with ended also a recently ended one.
// The error wraps fs.ErrNotExist.
func (t *procTable) lookup(sel ProcessSelector, ended bool) (*proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var p *proc
	if sel.Tag != "" {
		p = t.byTag[sel.Tag]
		if p == nil && ended {
			for _, e := range t.ended {
				if e.info.Tag == sel.Tag && (p == nil || e.endedAt.After(p.endedAt)) {
					p = e
				}
			}
		}
	} else {
		p = t.byPID[int(sel.PID)]
		if p == nil && ended {
			p = t.ended[int(sel.PID)]
		}
	}
	if p == nil {
		return nil, &errNoProcess{sel: sel}
	}
	return p, nil
}

// list returns the running processes, by pid.
func (t *procTable) list() []ProcessInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]ProcessInfo, 0, len(t.byPID))
	for _, p := range t.byPID {
		out = append(out, p.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// start starts cmd as a process of the table, with l (if not nil) connected before any output
// is read. cmd's stdio must be unset: start makes the pipes. It returns errTagInUse when a
// running process has cfg.Tag.
func (t *procTable) start(cmd *exec.Cmd, cfg ProcessConfig, l *listener) (*proc, error) {
	p := &proc{info: ProcessInfo{Tag: cfg.Tag, Config: cfg}, stdinSem: make(chan struct{}, 1),
		listeners: map[*listener]struct{}{}, done: make(chan struct{})}
	p.stdinSem <- struct{}{}
	if l != nil {
		p.listeners[l] = struct{}{}
	}
	pp, err := newPipes(cfg.Stdin)
	if err != nil {
		return nil, fmt.Errorf("making pipes: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pp.inR, pp.outW, pp.errW
	t.mu.Lock()
	if cfg.Tag != "" && t.byTag[cfg.Tag] != nil {
		t.mu.Unlock()
		pp.closeAll()
		return nil, &errTagInUse{tag: cfg.Tag}
	}
	done, err := t.reaper.start(cmd)
	pp.closeChildEnds()
	if err != nil {
		t.mu.Unlock()
		pp.closeAll()
		return nil, err
	}
	p.pid = cmd.Process.Pid
	p.info.PID = uint32(p.pid)
	p.stdin, p.stdinFile = pp.inW, pp.inW
	t.byPID[p.pid] = p
	delete(t.ended, p.pid) // a pid the kernel gave again
	if cfg.Tag != "" {
		t.byTag[cfg.Tag] = p
	}
	t.mu.Unlock()
	_ = cmd.Process.Release()
	go t.supervise(p, pp.outR, pp.errR, done)
	return p, nil
}

// supervise pumps p's output to its listeners, and once it exited and its output is drained
// (drainGrace after the exit at most: a background child may hold the pipes), records its end
// and moves it to the ended processes.
func (t *procTable) supervise(p *proc, outR, errR *os.File, done <-chan syscall.WaitStatus) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(outR, ProcessStdout) }()
	go func() { defer wg.Done(); p.pump(errR, ProcessStderr) }()
	ws := <-done
	p.mu.Lock()
	p.exited, p.exitedAt = true, time.Now()
	p.mu.Unlock()
	// Wakes a pump waiting for data; a pump that was busy sets its own before its next read.
	deadline := time.Now().Add(drainGrace)
	_ = outR.SetReadDeadline(deadline)
	_ = errR.SetReadDeadline(deadline)
	wg.Wait()
	outR.Close()
	errR.Close()
	p.closeStdin()
	end := ProcessEvent{Kind: ProcessEnd, PID: uint32(p.pid), ExitCode: ws.ExitStatus()}
	if ws.Signaled() {
		end.ExitCode = -1
		end.Signal = unix.SignalName(ws.Signal())
		if end.Signal == "" {
			end.Signal = fmt.Sprintf("SIG%d", int(ws.Signal()))
		}
		end.Error = "killed by " + end.Signal
	}
	now := time.Now()
	p.mu.Lock()
	p.end, p.endedAt = &end, now
	close(p.done)
	p.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byPID[p.pid] == p {
		delete(t.byPID, p.pid)
	}
	if p.info.Tag != "" && t.byTag[p.info.Tag] == p {
		delete(t.byTag, p.info.Tag)
	}
	for pid, e := range t.ended {
		if now.Sub(e.endedAt) > endedKeep {
			delete(t.ended, pid)
		}
	}
	if len(t.ended) >= maxEnded {
		var oldest *proc
		for _, e := range t.ended {
			if oldest == nil || e.endedAt.Before(oldest.endedAt) {
				oldest = e
			}
		}
		delete(t.ended, oldest.pid)
	}
	t.ended[p.pid] = p
}

// pump reads r until EOF or an error (the read deadline after the exit) and hands each chunk
// to every listener connected at that moment, waiting for each one's room (or its going).
func (p *proc) pump(r *os.File, kind string) {
	buf := make([]byte, 32<<10)
	for {
		if d, ok := p.drainDeadline(); ok {
			_ = r.SetReadDeadline(d)
		}
		n, err := r.Read(buf)
		if n > 0 {
			ev := ProcessEvent{Kind: kind, Data: append([]byte(nil), buf[:n]...)}
			for _, l := range p.connected() {
				select {
				case l.ch <- ev:
				case <-l.gone:
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// drainMax bounds the drain of a process's pipes after its exit, the time spent waiting for
// slow listeners included.
const drainMax = 5 * time.Second

// drainDeadline returns the read deadline of p's pipes once it exited: drainGrace without
// data from now (a background child may hold the pipes open), at most drainMax after the
// exit. The time a pump spent waiting for a listener does not count against drainGrace, so
// what a process wrote just before it exited reaches a listener that was slow for a moment.
func (p *proc) drainDeadline() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited {
		return time.Time{}, false
	}
	d := time.Now().Add(drainGrace)
	if hard := p.exitedAt.Add(drainMax); d.After(hard) {
		d = hard
	}
	return d, true
}

func (p *proc) connected() []*listener {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*listener, 0, len(p.listeners))
	for l := range p.listeners {
		out = append(out, l)
	}
	return out
}

// connect adds a listener; it returns it, and false when p has ended (the listener then only
// gets p's end).
func (p *proc) connect() (*listener, bool) {
	l := &listener{ch: make(chan ProcessEvent, listenerQueue), gone: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		return l, false
	}
	p.listeners[l] = struct{}{}
	return l, true
}

// disconnect removes l and releases the pump waiting for it.
func (p *proc) disconnect(l *listener) {
	p.mu.Lock()
	delete(p.listeners, l)
	p.mu.Unlock()
	close(l.gone)
}

// follow sends p's events for l to send until p's end (sent last) or ctx ends. It returns
// false when ctx ended first or send failed.
func (p *proc) follow(ctx context.Context, l *listener, send func(ProcessEvent) error) bool {
	for {
		select {
		case ev := <-l.ch:
			if send(ev) != nil {
				return false
			}
		case <-p.done:
			// The pumps have returned: what they queued for l is all in l.ch.
			for {
				select {
				case ev := <-l.ch:
					if send(ev) != nil {
						return false
					}
					continue
				default:
				}
				break
			}
			return send(*p.end) == nil
		case <-ctx.Done():
			return false
		}
	}
}

// write writes data to p's stdin, whole, unless ctx ends first (then what was written stays
// written). It returns errStdinClosed when stdin is not open.
func (p *proc) write(ctx context.Context, data []byte) error {
	select {
	case <-p.stdinSem:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { p.stdinSem <- struct{}{} }()
	f := p.stdin
	if f == nil {
		return errStdinClosed
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Now()) })
	_, err := f.Write(data)
	if !stop() {
		_ = f.SetWriteDeadline(time.Time{})
		if err != nil {
			return ctx.Err()
		}
	}
	return err
}

// closeStdin closes p's stdin (EOF for the process). Closing a closed one is no error; a
// write waiting for room is ended first.
func (p *proc) closeStdin() {
	if p.stdinFile != nil {
		_ = p.stdinFile.SetWriteDeadline(time.Now()) // ends a write blocked on a full pipe
	}
	<-p.stdinSem
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
	p.stdinSem <- struct{}{}
}

// signal sends sig to p and to its process group (a shell's children too).
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	if exited {
		return nil // its end is being recorded; its pid may be another process's already
	}
	err := syscall.Kill(p.pid, sig)
	_ = syscall.Kill(-p.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil // exited; the supervisor is about to record it
	}
	return err
}

// command builds the exec.Cmd of cfg for acc: environment, working directory and credentials.
func (a *Agent) command(cfg ProcessConfig, acc account) (*exec.Cmd, error) {
	cmd := exec.Command(cfg.Cmd, cfg.Args...)
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, kv := range a.baseEnv() {
		if k, v, ok := cutEnv(kv); ok {
			set(k, v)
		}
	}
	set("HOME", acc.Home)
	set("USER", acc.Name)
	set("LOGNAME", acc.Name)
	keys := make([]string, 0, len(cfg.Env))
	for k := range cfg.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		set(k, cfg.Env[k])
	}
	for _, k := range order {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	dir := cfg.Cwd
	switch {
	case dir == "":
		dir = acc.Home
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			dir = "/"
		}
	case !filepath.IsAbs(dir):
		dir = filepath.Join(acc.Home, dir)
	}
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("cwd %s: %w", dir, err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("cwd %s is not a directory: %w", dir, fs.ErrInvalid)
	}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if acc.UID != uint32(os.Getuid()) || acc.GID != uint32(os.Getgid()) || len(acc.Groups) > 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: acc.UID, Gid: acc.GID, Groups: acc.Groups}
	}
	return cmd, nil
}

func cutEnv(kv string) (k, v string, ok bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], i > 0
		}
	}
	return "", "", false
}
