package guest

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// ChildCapabilityDropped is the capability PID 1 keeps for itself but removes from the bounding
// set, so no process it starts (exec, run-code, services) can hold it: with it, code in the
// sandbox could mount over /zygo/host and take the channel's place. What is left for those
// processes is Docker's default set (docs/sandboxes.md, "What code in a sandbox can do").
const ChildCapabilityDropped = unix.CAP_SYS_ADMIN

// HardenPID1 is the first thing zygo-guest does as PID 1, before it reads the boot file:
//
//   - PR_SET_DUMPABLE 0 (prctl(2)): other processes of the sandbox, root included, can no
//     longer open /proc/1/mem, /proc/1/environ, /proc/1/maps or /proc/1/fd, nor ptrace PID 1,
//     unless they hold CAP_SYS_PTRACE, which the sandbox's capability set never grants
//     (bundle.go). The token lives in this process's memory.
//   - PR_CAPBSET_DROP of ChildCapabilityDropped on every thread (syscall.AllThreadsSyscall, so it
//     needs a cgo-free build, which zygo-guest is): the bounding set is per thread and inherited,
//     and execve(2) as root grants exactly the bounding set (capabilities(7), "Transformation of
//     capabilities during execve()"). PID 1's own effective set is unchanged: it still sets the
//     hostname and credits entropy at reseal.
//
// It returns the first error; zygo-guest refuses to start without both.
func HardenPID1() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, ChildCapabilityDropped, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN) on all threads: %w", errno)
	}
	return nil
}
