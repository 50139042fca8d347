package guest

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// reaper is PID 1's child collector. Every process the agent starts goes through start, which
// registers its pid; on SIGCHLD the reaper waits for every exited child, hands the status of
// registered ones to their waiter and discards orphans (re-parented zombies). The agent never
// calls exec.Cmd.Wait, which would race with wait4(-1).
type reaper struct {
	mu      sync.Mutex // guards waiters; held while starting a process and while reaping
	waiters map[int]chan syscall.WaitStatus
}

func newReaper() *reaper {
	return &reaper{waiters: make(map[int]chan syscall.WaitStatus)}
}

// start starts cmd and returns a channel that receives its wait status once. cmd's stdio must
// be *os.File or nil, so that exec starts no copying goroutines that only Wait would end.
func (r *reaper) start(cmd *exec.Cmd) (<-chan syscall.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	r.waiters[cmd.Process.Pid] = ch
	return ch, nil
}

// run reaps until ctx ends. A slow tick covers a SIGCHLD lost before Notify.
func (r *reaper) run(ctx context.Context) {
	sig := make(chan os.Signal, 16)
	signal.Notify(sig, syscall.SIGCHLD)
	defer signal.Stop(sig)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sig:
		case <-tick.C:
		}
		r.reap()
	}
}

func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		if ch, ok := r.waiters[pid]; ok {
			ch <- ws
			delete(r.waiters, pid)
		}
	}
}

// exitStatus converts a wait status to ExitStatus.
func exitStatus(ws syscall.WaitStatus) ExitStatus {
	if ws.Signaled() {
		return ExitStatus{Code: 128 + int(ws.Signal()), Signal: int(ws.Signal())}
	}
	return ExitStatus{Code: ws.ExitStatus()}
}

// timeNow is the agent's clock; a variable so tests can skew it.
var timeNow = time.Now
