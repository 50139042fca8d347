package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// drainGrace is how long output may keep arriving after the process exits (a background child
// holding the pipe open must not hang the call).
const drainGrace = 200 * time.Millisecond

// ExecKillGrace is how long an exec's process group has between the SIGTERM its timeout (or a
// caller that went away) sends and the SIGKILL that follows.
const ExecKillGrace = 2 * time.Second

// eventWriter writes NDJSON events and flushes each one. Used by one goroutine.
type eventWriter struct {
	enc *json.Encoder
	fl  http.Flusher
}

func newEventWriter(w http.ResponseWriter) *eventWriter {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	return &eventWriter{enc: json.NewEncoder(w), fl: fl}
}

func (e *eventWriter) send(ev Event) {
	_ = e.enc.Encode(ev)
	if e.fl != nil {
		e.fl.Flush()
	}
}

func (a *Agent) handleExec(w http.ResponseWriter, r *http.Request) {
	req, err := decodeExecBody(r.Body)
	if err != nil || len(req.Argv) == 0 {
		msg := "exec needs a JSON body with a non-empty argv"
		if err != nil {
			msg += ": " + err.Error()
		}
		writeError(w, http.StatusBadRequest, "invalid", msg)
		return
	}
	if req.Stdin != nil {
		w.Header().Set(stdinHeader, stdinStreamed)
	}
	ctx := r.Context()
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	ew := newEventWriter(w)
	st, err := a.runCommand(ctx, req, ew)
	if err != nil {
		ew.send(Event{Error: err.Error()})
		return
	}
	ew.send(Event{Exit: &st})
}

// pipes holds the parent's and child's ends of one exec's stdio. close closes the child ends.
type pipes struct {
	inR, inW, outR, outW, errR, errW *os.File
}

func newPipes(withStdin bool) (*pipes, error) {
	p := &pipes{}
	var err error
	if p.outR, p.outW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.errR, p.errW, err = os.Pipe(); err != nil {
		p.closeAll()
		return nil, err
	}
	if withStdin {
		p.inR, p.inW, err = os.Pipe()
	} else {
		p.inR, err = os.Open(os.DevNull)
	}
	if err != nil {
		p.closeAll()
	}
	return p, err
}

func (p *pipes) closeChildEnds() {
	for _, f := range []*os.File{p.inR, p.outW, p.errW} {
		if f != nil {
			f.Close()
		}
	}
}

func (p *pipes) closeAll() {
	p.closeChildEnds()
	for _, f := range []*os.File{p.inW, p.outR, p.errR} {
		if f != nil {
			f.Close()
		}
	}
}

// runCommand starts req, streams its output to ew and returns its exit status. A program
// that is missing (127) or cannot be executed (126) ends as a shell's does: that status, and
// a line saying why on stderr (notStarted). It returns an error only when the command could
// not start for another reason (a bad cwd, no pipes, no processes left).
func (a *Agent) runCommand(ctx context.Context, req ExecRequest, ew *eventWriter) (ExitStatus, error) {
	p, err := newPipes(req.Stdin != nil)
	if err != nil {
		return ExitStatus{}, err
	}
	defer p.closeAll()
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	cmd.Env = append(a.baseEnv(), req.Env...)
	cmd.Dir = req.Cwd
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	// Checked here: a chdir that fails in the child is reported by os/exec as
	// "fork/exec ARGV0: no such file or directory", naming the wrong thing.
	if st, err := os.Stat(cmd.Dir); err != nil {
		return ExitStatus{}, fmt.Errorf("cwd %s: %w", cmd.Dir, err)
	} else if !st.IsDir() {
		return ExitStatus{}, fmt.Errorf("cwd %s is not a directory: %w", cmd.Dir, fs.ErrInvalid)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.inR, p.outW, p.errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	done, err := a.reaper.start(cmd)
	p.closeChildEnds()
	if err != nil {
		if code, text, ok := notStarted(req.Argv[0], err); ok {
			ew.send(Event{Stream: "stderr", Data: []byte(text + "\n")})
			return ExitStatus{Code: code}, nil
		}
		return ExitStatus{}, err
	}
	defer cmd.Process.Release()
	if p.inW != nil {
		// Copy stdin as it arrives; its end (or a read error) closes the command's stdin. When
		// the command exits first, closeAll closes inW, which ends a Write blocked on a full
		// pipe; a Read blocked on the request body ends when the handler returns.
		go func() {
			_, _ = io.Copy(p.inW, req.Stdin)
			p.inW.Close() // closed again by closeAll; the second Close only returns an error
		}()
	}
	events := make(chan Event, 16)
	readers := 2
	go pump(p.outR, "stdout", events)
	go pump(p.errR, "stderr", events)
	var st ExitStatus
	pgid := cmd.Process.Pid
	exited, timedOut := false, false
	ctxDone := ctx.Done()
	var kill <-chan time.Time // armed by SIGTERM: SIGKILL when it fires
	var killTimer *time.Timer
	for readers > 0 || !exited {
		select {
		case ev, ok := <-events:
			if !ok || ev.Stream == "" {
				readers--
				continue
			}
			ew.send(ev)
		case ws := <-done:
			st, exited, done = exitStatus(ws), true, nil
			deadline := time.Now().Add(drainGrace)
			_ = p.outR.SetReadDeadline(deadline)
			_ = p.errR.SetReadDeadline(deadline)
		case <-ctxDone:
			// The whole group: a shell's children too. Once; keep collecting until the reaper reports.
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			timedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
			ctxDone = nil
			killTimer = time.NewTimer(ExecKillGrace)
			kill = killTimer.C
		case <-kill:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			kill, killTimer = nil, nil
		}
	}
	if killTimer != nil {
		// The leader is gone but members of its group may still be in their grace (or ignore
		// SIGTERM): they get their SIGKILL when it ends. The group id cannot be reused while a
		// member lives.
		go func() {
			<-killTimer.C
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}()
	}
	st.TimedOut = timedOut
	return st, nil
}

// pump copies r to events as chunks and sends an empty Event at EOF or error.
func pump(r io.Reader, stream string, events chan<- Event) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			events <- Event{Stream: stream, Data: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			events <- Event{}
			return
		}
	}
}

// notStarted classifies a failed start of argv0 as a shell does: 127 and "ARGV0: command not
// found" (or the errno's text) when there is no such program, 126 when it exists but cannot
// be executed (permission, not an executable, a directory). ok is false for any other
// failure, which is the daemon's, not the command's.
func notStarted(argv0 string, err error) (code int, text string, ok bool) {
	var errno syscall.Errno
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return 127, argv0 + ": command not found", true
	case !errors.As(err, &errno):
		return 0, "", false
	case errno == syscall.ENOENT || errno == syscall.ENOTDIR:
		return 127, argv0 + ": " + errno.Error(), true
	case errno == syscall.EACCES || errno == syscall.EPERM || errno == syscall.ENOEXEC || errno == syscall.EISDIR:
		return 126, argv0 + ": " + errno.Error(), true
	}
	return 0, "", false
}
