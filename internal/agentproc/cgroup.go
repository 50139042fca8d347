package agentproc

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// Cgroup is the sandbox's own cgroup, made by Spec.Cgroup. *cgroup.Group
// implements it (wrapped so that Exceeded names the manifest's keys).
type Cgroup interface {
	// Add moves one more host process into the group.
	Add(hostPID int) error
	// Exceeded names the limit that most likely killed a process of the
	// group and its value, such as ("zygote_memory_mib", "1024 MiB"), or
	// ("", "") when none did. It stays readable after Delete.
	Exceeded() (limit, value string)
	// Delete kills every process left in the group and removes it;
	// deleting again succeeds.
	Delete() error
}

// Held is what Spec.Hold made ready for one child ahead of its request
// (the function runtime: the child placed in its request cgroup). Exactly
// one of Begin and Drop is called, once.
type Held interface {
	// Begin starts the request the child serves, with its public id, after
	// the child is taken and before GO (before Request.BeforeGo). It
	// returns what to run once the outcome is known (nil: nothing), like
	// BeforeGo's after; on error the child is killed, the request fails,
	// and Begin has released what it held.
	Begin(ctx context.Context, requestID string) (after func(*Result), err error)
	// Drop releases it for a child that serves no request (the pool shrank,
	// the child died idle, the zygote or worker stopped); gone, when not
	// nil, is closed once the child's process is gone. It must not block.
	Drop(gone <-chan struct{})
}

// confine waits for bwrap to report the sandbox's process, has
// Spec.Cgroup make the group (with bwrap's own pid) and moves the
// sandbox's process in, then writes the byte that lets it run the agent
// (bwrap --block-fd). Nothing of the user's has run before that. On error
// the sandbox is still blocked: the caller kills it, and wait closes
// release only after bwrap has exited.
func (z *Process) confine(ctx context.Context, release *os.File) error {
	timer := time.NewTimer(z.spec.ReadyTimeout)
	defer timer.Stop()
	var child int
	select {
	case child = <-z.childPID:
	case <-z.done:
		return fmt.Errorf("%w: sandbox exited before it started: %w%s", errdefs.ErrUnavailable, z.exitErr, z.lastOutput())
	case <-timer.C:
		return fmt.Errorf("%w: sandbox did not report its process within %s", errdefs.ErrUnavailable, z.spec.ReadyTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
	g, err := z.spec.Cgroup(ctx, z.cmd.Process.Pid)
	if err != nil {
		return fmt.Errorf("placing the sandbox in its cgroup: %w", err)
	}
	z.mu.Lock()
	z.cg = g
	z.mu.Unlock()
	if err := g.Add(child); err != nil {
		return fmt.Errorf("placing the sandbox's process in its cgroup: %w", err)
	}
	if _, err := release.Write([]byte{1}); err != nil {
		return fmt.Errorf("releasing the sandbox: %w", err)
	}
	return nil
}

// exceeded is Cgroup.Exceeded of the sandbox's group; ("", "") without one.
func (z *Process) exceeded() (limit, value string) {
	z.mu.Lock()
	g := z.cg
	z.mu.Unlock()
	if g == nil {
		return "", ""
	}
	return g.Exceeded()
}

// deleteCgroup kills what is left in the sandbox's cgroup and removes it.
func (z *Process) deleteCgroup() {
	z.mu.Lock()
	g := z.cg
	z.mu.Unlock()
	if g == nil {
		return
	}
	if err := g.Delete(); err != nil {
		z.log.Warn("deleting the sandbox's cgroup", "err", err)
	}
}

// limitError is Start's error when the sandbox died before ready because it
// hit a limit of its cgroup, or nil.
func (z *Process) limitError() error {
	limit, value := z.exceeded()
	if limit == "" {
		return nil
	}
	return fmt.Errorf("%w: import exceeded %s: %s (the kernel killed the agent)",
		errdefs.ErrFailedPrecondition, limit, value)
}

// lastOutput is the tail of the agent's stderr for start-up errors, or "".
func (z *Process) lastOutput() string {
	z.tailMu.Lock()
	defer z.tailMu.Unlock()
	if len(z.stderrTail) == 0 {
		return ""
	}
	return "; its last output:\n" + strings.Join(z.stderrTail, "\n")
}
