package guest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a service the agent stops (reseal's OnForkRestart) has between
// SIGTERM and SIGKILL.
const stopGrace = 2 * time.Second

// Restart backoff of supervised services (docs/sandboxes.md, "Services"): the first restart
// waits RestartDelayMin, each consecutive one twice the last, up to RestartDelayMax; a process
// that stayed up RestartResetAfter brings the delay back to RestartDelayMin.
const (
	RestartDelayMin   = 100 * time.Millisecond
	RestartDelayMax   = 30 * time.Second
	RestartResetAfter = 10 * time.Second
)

// ValidateServices checks declared services: a unique, non-empty name without "/" or
// whitespace, a non-empty argv, an OnFork of "", restart, signal or keep, a Restart of "",
// on-failure, always or no, and a Signal in 0..64 (only with OnForkSignal). The error names the
// service and the field.
func ValidateServices(specs []Service) error {
	seen := make(map[string]bool, len(specs))
	for _, sp := range specs {
		if sp.Name == "" || strings.ContainsAny(sp.Name, "/ \t\n") {
			return fmt.Errorf("service name %q: want a non-empty name without slashes or spaces", sp.Name)
		}
		if seen[sp.Name] {
			return fmt.Errorf("service %q declared twice", sp.Name)
		}
		seen[sp.Name] = true
		if len(sp.Argv) == 0 || sp.Argv[0] == "" {
			return fmt.Errorf("service %q has no argv", sp.Name)
		}
		switch sp.OnFork {
		case "", OnForkRestart, OnForkKeep, OnForkSignal:
		default:
			return fmt.Errorf("service %q: on_fork %q: want restart, signal or keep", sp.Name, sp.OnFork)
		}
		switch sp.Restart {
		case "", RestartOnFailure, RestartAlways, RestartNo:
		default:
			return fmt.Errorf("service %q: restart %q: want on-failure, always or no", sp.Name, sp.Restart)
		}
		if sp.Signal < 0 || sp.Signal > 64 || (sp.Signal != 0 && sp.OnFork != OnForkSignal) {
			return fmt.Errorf("service %q: signal %d: want 1..64, and only with on_fork signal", sp.Name, sp.Signal)
		}
	}
	return nil
}

// restartPolicy is the effective policy of sp: RestartOnFailure unless it names another.
func (sp Service) restartPolicy() Restart {
	switch sp.Restart {
	case RestartAlways, RestartNo:
		return sp.Restart
	}
	return RestartOnFailure
}

// services runs the declared services, restarts those that end (per their Restart policy,
// with backoff) and applies their on_fork policy on reseal.
type services struct {
	log    *slog.Logger
	reaper *reaper
	env    func() []string
	// root is Config.Root: each service's stdout and stderr go to root/ServiceLogDir/NAME.log
	// (serviceLog). With root "" they go to /dev/null.
	root string
	// logMax bounds each log file, in bytes [MaxServiceLogBytes]; tests shorten it.
	logMax int64
	// delays of the restart backoff; zero fields take the Restart* constants (tests shorten them).
	delayMin, delayMax, resetAfter time.Duration

	forkMu sync.Mutex // serializes onFork and stopAll (each stops processes without holding mu)

	mu     sync.Mutex // guards order, byNm, closed and every service's and svcRun's fields
	order  []*service
	byNm   map[string]*service
	closed bool // stopAll ran: nothing starts again
}

type service struct {
	spec Service
	run  *svcRun     // the running process, or nil
	out  *serviceLog // where its processes' output goes; nil when services.root is ""

	restarts   int
	lastExit   *ExitStatus
	lastExitAt time.Time
	lastErr    string
	delay      time.Duration // the delay of the last restart; 0: none since a reset
	timer      *time.Timer   // a pending restart, or nil
	nextAt     time.Time
	// epoch changes whenever the agent starts or stops the service on purpose, so a restart
	// scheduled before does nothing.
	epoch int
}

// svcRun is one process of a service.
type svcRun struct {
	pid      int // also its process group id
	started  time.Time
	exited   chan struct{} // closed once its exit is recorded
	stopping bool          // the agent is stopping it: do not restart
}

func (s *services) startAll(specs []Service) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byNm = make(map[string]*service, len(specs))
	for _, sp := range specs {
		svc := &service{spec: sp}
		s.order = append(s.order, svc)
		s.byNm[sp.Name] = svc
		if err := s.startLocked(svc); err != nil {
			s.log.Error("starting service", "service", sp.Name, "err", err)
			s.scheduleLocked(svc, 0, true)
		}
	}
}

// startLocked starts svc in its own process group and a goroutine that supervises it. Its
// stdin is /dev/null; its stdout and stderr are one pipe whose read end the agent copies to
// the service's log (never PID 1's own stdio, which is a host file).
func (s *services) startLocked(svc *service) error {
	if len(svc.spec.Argv) == 0 {
		svc.lastErr = "no argv"
		return fmt.Errorf("service %q has no argv", svc.spec.Name)
	}
	cmd := exec.Command(svc.spec.Argv[0], svc.spec.Argv[1:]...)
	cmd.Env = append(s.env(), svc.spec.Env...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var outR, outW *os.File
	if s.root != "" {
		if svc.out == nil {
			svc.out = newServiceLog(serviceLogPath(s.root, svc.spec.Name), s.logBound(), s.log)
		}
		var err error
		if outR, outW, err = os.Pipe(); err != nil {
			svc.lastErr = err.Error()
			return fmt.Errorf("making the output pipe of service %q: %w", svc.spec.Name, err)
		}
		cmd.Stdout, cmd.Stderr = outW, outW
	}
	done, err := s.reaper.start(cmd)
	if outW != nil {
		outW.Close()
	}
	if err != nil {
		if outR != nil {
			outR.Close()
		}
		svc.lastErr = err.Error()
		return err
	}
	if outR != nil {
		go copyToLog(outR, svc.out)
	}
	svc.lastErr = ""
	r := &svcRun{pid: cmd.Process.Pid, started: time.Now(), exited: make(chan struct{})}
	svc.run = r
	go s.watch(svc, r, cmd.Process, done)
	return nil
}

// watch records how r ended and schedules a restart unless the agent stopped it on purpose.
func (s *services) watch(svc *service, r *svcRun, proc *os.Process, done <-chan syscall.WaitStatus) {
	ws := <-done
	proc.Release()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := exitStatus(ws)
	now := time.Now()
	svc.lastExit, svc.lastExitAt = &st, now
	if svc.run == r {
		svc.run = nil
	}
	close(r.exited)
	if r.stopping || s.closed {
		return
	}
	s.log.Warn("service exited", "service", svc.spec.Name, "code", st.Code, "signal", st.Signal,
		"ran", now.Sub(r.started).Round(time.Millisecond), "restart", svc.spec.restartPolicy())
	s.scheduleLocked(svc, now.Sub(r.started), st.Code != 0)
}

// scheduleLocked arms svc's next restart if its policy asks for one. ran is how long the
// process that ended stayed up; failed is true for a non-zero exit, a signal or a failed start.
func (s *services) scheduleLocked(svc *service, ran time.Duration, failed bool) {
	switch pol := svc.spec.restartPolicy(); {
	case s.closed, pol == RestartNo, pol == RestartOnFailure && !failed:
		return
	}
	dmin, dmax, reset := s.delays()
	d := min(svc.delay*2, dmax)
	if svc.delay == 0 || ran >= reset {
		d = dmin
	}
	svc.delay = d
	epoch := svc.epoch
	svc.nextAt = time.Now().Add(d)
	svc.timer = time.AfterFunc(d, func() { s.restartDue(svc, epoch) })
}

// serviceLogPath is where service name's log is, under root ("/" for the path inside the
// sandbox).
func serviceLogPath(root, name string) string {
	return filepath.Join(root, ServiceLogDir, name+".log")
}

func (s *services) logBound() int64 {
	if s.logMax > 0 {
		return s.logMax
	}
	return MaxServiceLogBytes
}

func (s *services) delays() (dmin, dmax, reset time.Duration) {
	dmin, dmax, reset = s.delayMin, s.delayMax, s.resetAfter
	if dmin == 0 {
		dmin = RestartDelayMin
	}
	if dmax == 0 {
		dmax = RestartDelayMax
	}
	if reset == 0 {
		reset = RestartResetAfter
	}
	return dmin, dmax, reset
}

// restartDue is a scheduled restart; it does nothing if the agent started or stopped the
// service meanwhile (epoch changed).
func (s *services) restartDue(svc *service, epoch int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || svc.epoch != epoch || svc.run != nil {
		return
	}
	svc.timer, svc.nextAt = nil, time.Time{}
	svc.restarts++
	if err := s.startLocked(svc); err != nil {
		s.log.Error("restarting service", "service", svc.spec.Name, "restarts", svc.restarts, "err", err)
		s.scheduleLocked(svc, 0, true)
		return
	}
	s.log.Info("restarted service", "service", svc.spec.Name, "restarts", svc.restarts, "pid", svc.run.pid)
}

// stopLocked makes svc stop on purpose: no pending or later restart. It returns the process
// to stop, or nil. The caller stops it with stopRun, without holding s.mu.
func (s *services) stopLocked(svc *service) *svcRun {
	svc.epoch++
	if svc.timer != nil {
		svc.timer.Stop()
		svc.timer, svc.nextAt = nil, time.Time{}
	}
	r := svc.run
	if r != nil {
		r.stopping = true
	}
	return r
}

// stopRun stops r's process group: SIGTERM, then SIGKILL after stopGrace (at once when ctx
// ends). It returns once r's exit is recorded, or ctx ended.
func stopRun(ctx context.Context, r *svcRun) {
	_ = syscall.Kill(-r.pid, syscall.SIGTERM)
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-r.exited:
		return
	case <-t.C:
	case <-ctx.Done():
	}
	_ = syscall.Kill(-r.pid, syscall.SIGKILL)
	select {
	case <-r.exited:
	case <-ctx.Done():
	}
}

// restart stops svc (if running) and starts a fresh process: reseal's OnForkRestart. The
// backoff starts over; a failed start is returned (and scheduled per the policy).
func (s *services) restart(ctx context.Context, svc *service) error {
	s.mu.Lock()
	r := s.stopLocked(svc)
	s.mu.Unlock()
	if r != nil {
		stopRun(ctx, r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	svc.delay = 0
	if s.closed {
		return nil
	}
	if err := s.startLocked(svc); err != nil {
		s.scheduleLocked(svc, 0, true)
		return err
	}
	return nil
}

// stopAll stops every service for good (no restarts). Used when the agent shuts down.
func (s *services) stopAll(ctx context.Context) {
	s.forkMu.Lock()
	defer s.forkMu.Unlock()
	s.mu.Lock()
	s.closed = true
	var runs []*svcRun
	for _, svc := range s.order {
		if r := s.stopLocked(svc); r != nil {
			runs = append(runs, r)
		}
	}
	s.mu.Unlock()
	for _, r := range runs {
		stopRun(ctx, r)
	}
}

// onFork applies every service's policy, in declaration order, and returns one
// "name: action (status)" line per service.
func (s *services) onFork(ctx context.Context) ([]string, error) {
	s.forkMu.Lock()
	defer s.forkMu.Unlock()
	s.mu.Lock()
	order := append([]*service(nil), s.order...)
	s.mu.Unlock()
	var out []string
	for _, svc := range order {
		name := svc.spec.Name
		switch svc.spec.OnFork {
		case OnForkRestart:
			if err := s.restart(ctx, svc); err != nil {
				return out, fmt.Errorf("restarting service %q: %w", name, err)
			}
			out = append(out, name+": restarted"+s.note(svc))
		case OnForkSignal:
			sig := syscall.Signal(svc.spec.Signal)
			if sig == 0 {
				sig = syscall.SIGHUP
			}
			s.mu.Lock()
			r := svc.run
			ok := r != nil && syscall.Kill(-r.pid, sig) == nil
			s.mu.Unlock()
			if !ok {
				out = append(out, name+": not running, not signalled"+s.note(svc))
				continue
			}
			out = append(out, fmt.Sprintf("%s: signalled %d%s", name, sig, s.note(svc)))
		default:
			out = append(out, name+": kept"+s.note(svc))
		}
	}
	return out, nil
}

// note is " (restarts N, last exit …)" for a service that was ever restarted or ended, else "".
func (s *services) note(svc *service) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if svc.restarts == 0 && svc.lastExit == nil && svc.lastErr == "" {
		return ""
	}
	parts := []string{fmt.Sprintf("restarts %d", svc.restarts)}
	if e := svc.lastExit; e != nil && e.Signal != 0 {
		parts = append(parts, fmt.Sprintf("last exit signal %d", e.Signal))
	} else if e != nil {
		parts = append(parts, fmt.Sprintf("last exit code %d", e.Code))
	}
	if svc.lastErr != "" {
		parts = append(parts, "last start failed: "+svc.lastErr)
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// status returns the state of every service, in declaration order.
func (s *services) status() []ServiceStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ServiceStatus, 0, len(s.order))
	for _, svc := range s.order {
		st := ServiceStatus{Name: svc.spec.Name, Restart: svc.spec.restartPolicy(), Restarts: svc.restarts,
			LastExitAt: svc.lastExitAt, LastError: svc.lastErr, NextRestartAt: svc.nextAt}
		if svc.lastExit != nil {
			e := *svc.lastExit
			st.LastExit = &e
		}
		if svc.run != nil {
			st.Running, st.PID = true, svc.run.pid
		}
		if s.root != "" {
			st.Log = serviceLogPath("/", svc.spec.Name)
		}
		out = append(out, st)
	}
	return out
}
