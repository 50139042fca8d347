package guest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a restarted service has between SIGTERM and SIGKILL.
const stopGrace = 2 * time.Second

// services runs the declared services and applies their on_fork policy on reseal.
type services struct {
	log    *slog.Logger
	reaper *reaper
	env    func() []string

	mu   sync.Mutex // guards byNm
	byNm map[string]*service
}

type service struct {
	spec Service
	proc *os.Process
	done <-chan syscall.WaitStatus
}

func (s *services) startAll(specs []Service) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byNm = make(map[string]*service, len(specs))
	for _, sp := range specs {
		svc := &service{spec: sp}
		s.byNm[sp.Name] = svc
		if err := s.startLocked(svc); err != nil {
			s.log.Error("starting service", "service", sp.Name, "err", err)
		}
	}
}

func (s *services) startLocked(svc *service) error {
	if len(svc.spec.Argv) == 0 {
		return fmt.Errorf("service %q has no argv", svc.spec.Name)
	}
	cmd := exec.Command(svc.spec.Argv[0], svc.spec.Argv[1:]...)
	cmd.Env = append(s.env(), svc.spec.Env...)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	done, err := s.reaper.start(cmd)
	if err != nil {
		return err
	}
	svc.proc, svc.done = cmd.Process, done
	return nil
}

// stopLocked stops svc's process group: SIGTERM, then SIGKILL after stopGrace.
func stopLocked(ctx context.Context, svc *service) {
	if svc.proc == nil {
		return
	}
	pid := svc.proc.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-svc.done:
	case <-t.C:
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-svc.done
	case <-ctx.Done():
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	svc.proc.Release()
	svc.proc = nil
}

// onFork applies every service's policy and returns one "name: action" line per service.
func (s *services) onFork(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name, svc := range s.byNm {
		switch svc.spec.OnFork {
		case OnForkRestart:
			stopLocked(ctx, svc)
			if err := s.startLocked(svc); err != nil {
				return out, fmt.Errorf("restarting service %q: %w", name, err)
			}
			out = append(out, name+": restarted")
		case OnForkSignal:
			sig := syscall.Signal(svc.spec.Signal)
			if sig == 0 {
				sig = syscall.SIGHUP
			}
			if svc.proc == nil || syscall.Kill(-svc.proc.Pid, sig) != nil {
				out = append(out, name+": not running, not signalled")
				continue
			}
			out = append(out, fmt.Sprintf("%s: signalled %d", name, sig))
		default:
			out = append(out, name+": kept")
		}
	}
	return out, nil
}
