package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/sandbox"
)

var _ sandbox.ExitWatcher = (*Backend)(nil)

// WaitExit implements sandbox.ExitWatcher. It watches the runsc sandbox process (the Sentry,
// the pid `runsc state` reports) through a pidfd, waiting in Go's netpoller, so a watch costs
// a file descriptor and no thread. That process exits when it is killed or crashes, and when
// the container's PID 1 (zygo-guest) exits; its gofer exits with it. The cause returned says
// which pid exited, which limit the instance had reached when it did (its cgroup's OOM kills,
// host task limit hits), and the last line of the instance's runsc.log.
func (b *Backend) WaitExit(ctx context.Context, id string) error {
	st, err := b.state(ctx, id)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("container %s is gone (%v): %w", id, err, sandbox.ErrEngineExited)
	}
	if st.Status != "running" || st.PID <= 0 {
		return fmt.Errorf("container %s is %s: %w", id, st.Status, sandbox.ErrEngineExited)
	}
	fd, err := unix.PidfdOpen(st.PID, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("the sandbox process (pid %d) of %s is gone: %w", st.PID, id, sandbox.ErrEngineExited)
	}
	if err != nil {
		return fmt.Errorf("opening a pidfd for the sandbox process of %s: %w", id, err)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	// No second `runsc state` to rule out the pid being reused between the two calls: it would
	// need the sandbox to die and its pid to wrap around within them, and each runsc process
	// competes for the CPU with the restores of a fork (one watch starts per child).
	if err := waitReadable(ctx, f); err != nil {
		return err
	}
	cause := fmt.Sprintf("the sandbox process (pid %d) of %s exited", st.PID, id)
	if lim := b.limitCause(id); lim != "" {
		cause += ": " + lim
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
