package guest

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
)

//go:embed interp.py
var interpSource string

// interp is the persistent Python process behind run-code. It is started on first use and
// lives as long as the sandbox; its globals are part of every checkpoint. Calls are queued by
// the Python side (one at a time); a call whose ctx ends interrupts the running code with
// SIGINT and returns.
type interp struct {
	python string
	env    func() []string
	reaper *reaper

	mu      sync.Mutex // guards the fields below
	proc    *os.Process
	cmdW    *os.File
	nextID  int64
	waiters map[int64]chan interpEvent
	reseed  string // hex seed to apply before the next code; "" when none is pending
	dead    error  // set when the process ended; the next call starts a new one
}

type interpEvent struct {
	ID     int64  `json:"id"`
	Stream string `json:"stream"`
	Data   string `json:"data"`
	Done   bool   `json:"done"`
	OK     bool   `json:"ok"`
	Value  string `json:"value"`
	Error  string `json:"error"`
}

// setReseed makes the interpreter reseed its generators before it runs the next code.
func (in *interp) setReseed(seed []byte) {
	in.mu.Lock()
	in.reseed = hex.EncodeToString(seed)
	in.mu.Unlock()
}

// startLocked starts the Python process. Its fd 3 reads commands, fd 4 writes events; its own
// stdout and stderr go to the agent's.
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
	cmd := exec.Command(in.python, "-I", "-u", "-c", interpSource)
	cmd.Env = in.env()
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.ExtraFiles = []*os.File{cmdR, evW}
	done, err := in.reaper.start(cmd)
	cmdR.Close()
	evW.Close()
	if err != nil {
		cmdW.Close()
		evR.Close()
		return fmt.Errorf("starting %s: %w", in.python, err)
	}
	in.proc, in.cmdW, in.dead = cmd.Process, cmdW, nil
	if in.waiters == nil {
		in.waiters = make(map[int64]chan interpEvent)
	}
	go in.readEvents(evR, done)
	return nil
}

// readEvents dispatches events to waiting calls until the process's event pipe closes, then
// fails every waiter.
func (in *interp) readEvents(evR *os.File, done <-chan syscall.WaitStatus) {
	defer evR.Close()
	sc := bufio.NewScanner(evR)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var ev interpEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		in.mu.Lock()
		ch := in.waiters[ev.ID]
		if ev.Done {
			delete(in.waiters, ev.ID)
		}
		in.mu.Unlock()
		if ch != nil {
			ch <- ev
		}
	}
	ws := <-done
	in.mu.Lock()
	defer in.mu.Unlock()
	in.dead = fmt.Errorf("interpreter exited: %v", exitStatus(ws))
	in.cmdW.Close()
	in.proc.Release()
	in.proc = nil
	for id, ch := range in.waiters {
		ch <- interpEvent{ID: id, Done: true, Error: in.dead.Error()}
		delete(in.waiters, id)
	}
}

// submit queues code and returns the channel of its events.
func (in *interp) submit(code string) (int64, chan interpEvent, *os.Process, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.proc == nil {
		if err := in.startLocked(); err != nil {
			return 0, nil, nil, err
		}
	}
	in.nextID++
	id := in.nextID
	ch := make(chan interpEvent, 64)
	in.waiters[id] = ch
	b, _ := json.Marshal(map[string]any{"id": id, "code": code, "reseed": in.reseed})
	if _, err := in.cmdW.Write(append(b, '\n')); err != nil {
		delete(in.waiters, id)
		return 0, nil, nil, fmt.Errorf("sending code to interpreter: %w", err)
	}
	in.reseed = ""
	return id, ch, in.proc, nil
}

// run executes code, sending output events to ew. It returns the result, or an error when the
// interpreter could not be reached.
func (in *interp) run(ctx context.Context, code string, ew *eventWriter) (CodeResult, error) {
	id, ch, proc, err := in.submit(code)
	if err != nil {
		return CodeResult{}, err
	}
	interrupted := false
	for {
		select {
		case ev := <-ch:
			if !ev.Done {
				ew.send(Event{Stream: ev.Stream, Data: []byte(ev.Data)})
				continue
			}
			if interrupted && !ev.OK {
				ev.Error = "timed out: " + ev.Error
			}
			return CodeResult{OK: ev.OK, Value: ev.Value, Error: ev.Error}, nil
		case <-ctx.Done():
			if interrupted {
				continue
			}
			interrupted = true
			_ = proc.Signal(syscall.SIGINT)
			if errors.Is(ctx.Err(), context.Canceled) { // the caller left: don't wait for the result
				in.mu.Lock()
				delete(in.waiters, id)
				in.mu.Unlock()
				return CodeResult{}, ctx.Err()
			}
			ctx = context.Background()
		}
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
