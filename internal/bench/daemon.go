package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/zygo-run/zygo/internal/daemon"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// benchDaemon is a private `zygo serve` in its own process, so that the CPU
// /proc/PID/stat gives for it is the daemon's alone (not the bench client's).
type benchDaemon struct {
	cmd    *exec.Cmd
	client *zygo.Client
	sock   string // the daemon's API socket
}

// startDaemon runs cfg.Zygo serve on state (sandboxes off, the Go CPU
// profile to cfg.CPUProfile when set) and waits until it answers.
func startDaemon(ctx context.Context, cfg Config, state string) (*benchDaemon, error) {
	args := []string{"serve", "--state-dir", state, "--no-sandboxes"}
	if cfg.CPUProfile != "" {
		args = append(args, "--cpuprofile", cfg.CPUProfile)
	}
	cmd := exec.Command(cfg.Zygo, args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} // a killed bench leaves no daemon
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the daemon (%s; make build makes it): %w", cfg.Zygo, err)
	}
	sock := daemon.SocketPath(state)
	d := &benchDaemon{cmd: cmd, client: zygo.NewClient(sock), sock: sock}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := d.client.Functions(ctx); err == nil {
			go func() { <-exited }()
			return d, nil
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("the daemon exited before it answered: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = cmd.Process.Kill()
			<-exited
			return nil, fmt.Errorf("the daemon did not answer within 60s")
		}
	}
}

// stop ends the daemon with SIGTERM (it stops its zygotes and writes its
// profile) and waits up to 30s for it, then kills it.
func (d *benchDaemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	for i := 0; i < 300; i++ {
		if err := d.cmd.Process.Signal(syscall.Signal(0)); err != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = d.cmd.Process.Kill()
}
