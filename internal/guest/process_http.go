package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// maxProcessConfigBytes bounds the JSON of one ProcessConfig (argv and env are at most 2 MiB
// together, sandbox.MaxArgvEnvBytes).
const maxProcessConfigBytes = 8 << 20

// ndjsonWriter writes NDJSON values and flushes each one. Used by one goroutine.
type ndjsonWriter struct {
	enc *json.Encoder
	fl  http.Flusher
}

func newNDJSONWriter(w http.ResponseWriter) *ndjsonWriter {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	if fl != nil {
		fl.Flush() // the headers: the host learns the call was accepted
	}
	return &ndjsonWriter{enc: json.NewEncoder(w), fl: fl}
}

func (e *ndjsonWriter) send(v any) error {
	if err := e.enc.Encode(v); err != nil {
		return err
	}
	if e.fl != nil {
		e.fl.Flush()
	}
	return nil
}

// writeOpError answers err of a process or filesystem operation with its category: a missing
// process, path or user... (not_found, invalid), an existing one (exists), a permission
// (permission_denied), a busy path or a non-empty directory (conflict).
func writeOpError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, fs.ErrExist):
		writeError(w, http.StatusConflict, "exists", err.Error())
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		writeError(w, http.StatusForbidden, "permission_denied", err.Error())
	case errors.Is(err, syscall.EBUSY), errors.Is(err, syscall.ETXTBSY), errors.Is(err, syscall.ENOTEMPTY),
		errors.Is(err, errStdinClosed), errors.Is(err, syscall.EPIPE), errors.Is(err, os.ErrDeadlineExceeded):
		// A stdin closed meanwhile (by CloseStdin, or the process's exit) is the same conflict.
		writeError(w, http.StatusConflict, "conflict", err.Error())
	case errors.Is(err, fs.ErrInvalid), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.EXDEV), errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ELOOP),
		errors.Is(err, syscall.ENAMETOOLONG):
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
	case errors.Is(err, errTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", err.Error())
	default:
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
	}
}

// selector reads ?pid= or ?tag= (exactly one).
func selector(r *http.Request) (ProcessSelector, error) {
	q := r.URL.Query()
	var sel ProcessSelector
	sel.Tag = q.Get("tag")
	if s := q.Get("pid"); s != "" {
		pid, err := strconv.ParseUint(s, 10, 32)
		if err != nil || pid == 0 {
			return sel, fmt.Errorf("pid %q: want a positive number: %w", s, fs.ErrInvalid)
		}
		sel.PID = uint32(pid)
	}
	if (sel.PID == 0) == (sel.Tag == "") {
		return sel, fmt.Errorf("selector: want exactly one of pid and tag: %w", fs.ErrInvalid)
	}
	return sel, nil
}

func (a *Agent) handleStartProcess(w http.ResponseWriter, r *http.Request) {
	var cfg ProcessConfig
	if err := json.NewDecoder(io.LimitReader(r.Body, maxProcessConfigBytes)).Decode(&cfg); err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "process start needs a JSON ProcessConfig: "+err.Error())
		return
	}
	if cfg.Cmd == "" {
		writeError(w, http.StatusBadRequest, "invalid", "cmd: is empty: want the program to run")
		return
	}
	acc, err := a.lookupUser(cfg.User)
	if err != nil {
		writeOpError(w, err)
		return
	}
	cmd, err := a.command(cfg, acc)
	if err != nil {
		writeOpError(w, err)
		return
	}
	l := &listener{ch: make(chan ProcessEvent, listenerQueue), gone: make(chan struct{})}
	p, err := a.procs.start(cmd, cfg, l)
	if err != nil {
		var errno syscall.Errno
		switch {
		case errors.Is(err, fs.ErrExist):
			writeOpError(w, err)
		case errors.Is(err, exec.ErrNotFound) || errors.As(err, &errno) && (errno == syscall.ENOENT || errno == syscall.ENOTDIR):
			writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("cmd %q: %v", cfg.Cmd, err))
		case errors.As(err, &errno) && (errno == syscall.EACCES || errno == syscall.EPERM || errno == syscall.ENOEXEC || errno == syscall.EISDIR):
			writeError(w, http.StatusForbidden, "permission_denied", fmt.Sprintf("cmd %q: cannot be executed: %v", cfg.Cmd, err))
		default:
			writeError(w, http.StatusInternalServerError, "internal", fmt.Sprintf("starting %q: %v", cfg.Cmd, err))
		}
		return
	}
	defer p.disconnect(l)
	nw := newNDJSONWriter(w)
	if nw.send(ProcessEvent{Kind: ProcessStart, PID: uint32(p.pid)}) != nil {
		return
	}
	p.follow(r.Context(), l, func(ev ProcessEvent) error { return nw.send(ev) })
}

func (a *Agent) handleConnectProcess(w http.ResponseWriter, r *http.Request) {
	sel, err := selector(r)
	if err != nil {
		writeOpError(w, err)
		return
	}
	p, err := a.procs.lookup(sel, true)
	if err != nil {
		writeOpError(w, err)
		return
	}
	l, live := p.connect()
	if live {
		defer p.disconnect(l)
	}
	nw := newNDJSONWriter(w)
	if nw.send(ProcessEvent{Kind: ProcessStart, PID: uint32(p.pid)}) != nil {
		return
	}
	p.follow(r.Context(), l, func(ev ProcessEvent) error { return nw.send(ev) })
}

func (a *Agent) handleListProcesses(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(a.procs.list())
}

func (a *Agent) handleProcessInput(w http.ResponseWriter, r *http.Request) {
	sel, err := selector(r)
	if err != nil {
		writeOpError(w, err)
		return
	}
	p, err := a.procs.lookup(sel, false)
	if err != nil {
		writeOpError(w, err)
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, MaxInputBytes+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "reading input: "+err.Error())
		return
	}
	if len(data) > MaxInputBytes {
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("data: more than %d bytes in one input", MaxInputBytes))
		return
	}
	if err := p.write(r.Context(), data); err != nil {
		writeOpError(w, fmt.Errorf("process %d: writing stdin: %w", p.pid, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *Agent) handleProcessCloseStdin(w http.ResponseWriter, r *http.Request) {
	sel, err := selector(r)
	if err != nil {
		writeOpError(w, err)
		return
	}
	p, err := a.procs.lookup(sel, false)
	if err != nil {
		writeOpError(w, err)
		return
	}
	p.closeStdin()
	w.WriteHeader(http.StatusNoContent)
}

func (a *Agent) handleProcessSignal(w http.ResponseWriter, r *http.Request) {
	sel, err := selector(r)
	if err != nil {
		writeOpError(w, err)
		return
	}
	n, err := strconv.Atoi(r.URL.Query().Get("signal"))
	if err != nil || n < 1 || n > 64 {
		writeError(w, http.StatusBadRequest, "invalid", "signal: want a number from 1 to 64")
		return
	}
	p, err := a.procs.lookup(sel, false)
	if err != nil {
		writeOpError(w, err)
		return
	}
	if err := p.signal(syscall.Signal(n)); err != nil {
		writeOpError(w, fmt.Errorf("signalling process %d: %w", p.pid, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *Agent) handleUser(w http.ResponseWriter, r *http.Request) {
	acc, err := a.lookupUser(r.URL.Query().Get("name"))
	if err != nil {
		writeOpError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(acc.UserInfo)
}
