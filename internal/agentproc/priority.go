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
// So once ready, when it keeps a pool, the zygote's nice value is raised by
// refillNiceOffset (a lower priority), which every child it forks inherits (its fork, its
// pre-warm and its idle wait are work done ahead), and right before a child's GO the daemon
// lowers the child's back by as much: a request runs at the zygote's own priority, ahead
// of the refills. Only a nice value the daemon set is ever undone: one the import, the
// child or an operator chose is left as it is.
//
// Where the sandbox is an autogroup of its own (bwrap's --new-session, a daemon in the
// root cpu cgroup) these nice values order the zygote's own processes among themselves; a
// daemon in a cpu cgroup of its own (systemd's Delegate=yes) has its zygotes in it, and
// there the refills also rank below the daemon and other functions' requests.
const refillNiceOffset = 4

// niceOf returns the nice value (-20..19) of process pid (its thread-group leader):
// getpriority(2)'s raw system call answers 20 - nice, which x/sys/unix passes on.
func niceOf(pid int) (int, error) {
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, pid)
	if err != nil {
		return 0, err
	}
	return 20 - raw, nil
}

// lowerZygotePriority raises the zygote's nice value (the sandbox's PID 1, host pid z.pid1,
// known once ready has come from it) by refillNiceOffset, from what its import left it at,
// and records both for restorePriority. A zygote already above 19 - refillNiceOffset is
// left as it is (and its children then too); a failure (the zygote gone) is left to the
// zygote's own exit to report.
func (z *Process) lowerZygotePriority() {
	if z.pid1 <= 0 {
		return
	}
	own, err := niceOf(z.pid1)
	if err != nil || own+refillNiceOffset > 19 {
		return
	}
	if unix.Setpriority(unix.PRIO_PROCESS, z.pid1, own+refillNiceOffset) == nil {
		z.nice = childNice{lowered: true, own: own, refill: own + refillNiceOffset}
	}
}

// childNice is what lowerZygotePriority did: the zygote's nice value before (own) and after
// (refill).
type childNice struct {
	lowered     bool
	own, refill int
}

// restorePriority gives c, a child of the pool's zygote before its GO, the zygote's own
// nice value back, when c still has the one the zygote was given (anything else was
// chosen by c's code or an operator, and stands). setpriority(2) names a pid, not a
// pidfd: c was alive when taken from the pool, and its pid names no other process until
// the zygote has reaped it and the pid space has wrapped, which a request's few
// microseconds between take and here leave no room for.
func (z *Process) restorePriority(c *child) {
	if !z.nice.lowered || c.hostPID <= 0 {
		return
	}
	if n, err := niceOf(c.hostPID); err == nil && n == z.nice.refill {
		_ = unix.Setpriority(unix.PRIO_PROCESS, c.hostPID, z.nice.own)
	}
}
