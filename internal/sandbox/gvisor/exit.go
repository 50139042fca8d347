package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/sandbox"
)

var _ sandbox.ExitWatcher = (*Backend)(nil)

// sandboxPIDFile, in the instance dir, holds the sandbox process's pid (runsc --pid-file).
const sandboxPIDFile = "sandbox.pid"

// sandboxPID returns the pid of id's sandbox process: from the pid file runsc wrote at run or
// restore, which costs no runsc process on the fork path, else (an instance started by an
// older daemon) from `runsc state`. An error wraps sandbox.ErrEngineExited when the container
// is gone or not running, or is ctx's.
func (b *Backend) sandboxPID(ctx context.Context, id string) (int, error) {
	if raw, err := os.ReadFile(filepath.Join(b.InstanceDir(id), sandboxPIDFile)); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil && pid > 0 {
			return pid, nil
		}
	}
	st, err := b.state(ctx, id)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("container %s is gone: %w: %w", id, err, sandbox.ErrEngineExited)
	}
	if st.Status != "running" || st.PID <= 0 {
		return 0, fmt.Errorf("container %s is %s: %w", id, st.Status, sandbox.ErrEngineExited)
	}
	return st.PID, nil
}

// WaitExit implements sandbox.ExitWatcher. It watches the runsc sandbox process (the Sentry,
// whose pid runsc wrote to the instance's pid file) through a pidfd, waiting in Go's
// netpoller, so a watch costs a file descriptor, no thread and no runsc process. That process exits when it is killed or crashes, and when
// the container's PID 1 (zygo-guest) exits; its gofer exits with it. The cause returned says
// which pid exited, which limit the instance had reached when it did (its cgroup's OOM kills,
// host task limit hits), and the last line of the instance's runsc.log.
func (b *Backend) WaitExit(ctx context.Context, id string) error {
	pid, err := b.sandboxPID(ctx, id)
	if err != nil {
		return err
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("the sandbox process (pid %d) of %s is gone: %w", pid, id, sandbox.ErrEngineExited)
	}
	if err != nil {
		return fmt.Errorf("opening a pidfd for the sandbox process of %s: %w", id, err)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	// The pid is not checked again against `runsc state`: a reuse would need the sandbox to
	// die and its pid to wrap around between runsc writing the file and this open, and each
	// runsc process competes for the CPU with the restores of a fork (one watch per child).
	if err := waitReadable(ctx, f); err != nil {
		return err
	}
	cause := fmt.Sprintf("the sandbox process (pid %d) of %s exited", pid, id)
	if lim := b.limitCause(id); lim != "" { // the reason first: sandbox ls shows the start
		cause = fmt.Sprintf("%s (the sandbox process (pid %d) of %s exited)", lim, pid, id)
	}
	if line := lastLogLine(filepath.Join(b.InstanceDir(id), "runsc.log")); line != "" {
		cause += fmt.Sprintf(" (runsc.log: %q)", line)
	}
	return fmt.Errorf("%s: %w", cause, sandbox.ErrEngineExited)
}

// waitReadable waits until the pidfd f is readable (its process exited) or ctx ends (ctx's
// error), in the netpoller.
func waitReadable(ctx context.Context, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("watching pidfd: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Now()) })
	defer stop()
	err = rc.Read(func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 0)
		return err == nil && n > 0 // false: not yet, wait for the netpoller
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("watching pidfd: %w", err)
	}
	return nil
}

// lastLogLine returns the last line of the file at p (at most its last 4 KiB), or "".
func lastLogLine(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	buf := make([]byte, 4096)
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-int64(len(buf)), 0)
	n, _ := f.ReadAt(buf, off)
	return lastLine(buf[:n])
}
