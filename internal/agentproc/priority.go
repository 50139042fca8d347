package agentproc

import (
	"golang.org/x/sys/unix"
)

// The CPU priority of a fork-mode zygote's background work.
//
// The pool forks a child to replace the one a request takes as the request starts, and the
// new child pre-warms at once: the zygote's fork and that pre-warm ran while the request's
// own child served, on the same few CPUs, and the GO'd child waited behind them (a
// scheduler trace of back-to-back one-client requests, docs/BENCHMARKS.md, ninth round).
// So once ready, when it keeps a pool, the zygote runs refillNiceOffset nice values below the daemon's own
// priority, which every child it forks inherits (its fork, its pre-warm and its idle wait
// are work done ahead), and the daemon gives a child the daemon's own priority right
// before its GO: a request runs ahead of the refills. Nice values order tasks within one
// scheduling group; the zygote and its children share one (bwrap's --new-session makes the
// sandbox an autogroup of its own, and request cgroups carry no cpu controller).
const refillNiceOffset = 4

// ownNice returns the daemon's nice value (-20..19; 0 when it cannot be read).
// getpriority(2)'s raw system call answers 20 - nice, which x/sys/unix passes on.
func ownNice() int {
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		return 0
	}
	return 20 - raw
}

// lowerZygotePriority sets the zygote's nice value (the sandbox's PID 1, host pid z.pid1,
// known once ready has come from it) to refillNiceOffset below the daemon's, at most 19,
// and records the daemon's for restorePriority. A failure (the zygote gone) is left to the
// zygote's own exit to report.
func (z *Process) lowerZygotePriority() {
	z.baseNice = ownNice()
	if z.pid1 <= 0 {
		return
	}
	_ = unix.Setpriority(unix.PRIO_PROCESS, z.pid1, min(z.baseNice+refillNiceOffset, 19))
}

// restorePriority gives c, a child of the fork zygote before its GO, the daemon's own nice
// value (recorded by lowerZygotePriority). setpriority(2) names a pid, not a pidfd: c's pid
// stays c's until the zygote reaps it, and a reaped pid comes back only after the pid space
// wraps; a child gone meanwhile fails its request at GO.
func (z *Process) restorePriority(c *child) {
	if c.hostPID > 0 {
		_ = unix.Setpriority(unix.PRIO_PROCESS, c.hostPID, z.baseNice)
	}
}
