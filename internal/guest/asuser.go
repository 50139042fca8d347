package guest

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// asUser runs fn on a fresh OS thread whose credentials are acc's (uid, gid and
// supplementary groups), so that the kernel of the sandbox checks every open, mkdir and
// rename fn makes as it would for a process of that user: mode bits, ACLs, sticky
// directories, read-only mounts. The agent (root) checks no permission bits itself.
//
// The credentials are set with raw per-thread syscalls (Go's syscall.Setresuid changes every
// thread of the process), and the thread is never handed back: fn's goroutine ends locked to
// it, so the runtime ends the thread with it. acc nil runs fn as the agent (root), on the
// caller's goroutine. New threads the runtime starts meanwhile come from its template thread,
// not this one, so they never inherit the user's credentials. fn's error is returned as is.
func asUser(acc *account, fn func() error) error {
	if acc == nil {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		done <- switchThreadCreds(acc, fn)
	}()
	return <-done
}

func switchThreadCreds(acc *account, fn func() error) error {
	groups := append([]uint32{acc.GID}, acc.Groups...)
	var err error
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(&groups[0])), 0); e != 0 {
		err = e
	} else if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(acc.GID), uintptr(acc.GID), uintptr(acc.GID)); e != 0 {
		err = e
	} else if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(acc.UID), uintptr(acc.UID), uintptr(acc.UID)); e != 0 {
		err = e
	}
	if err != nil {
		return fmt.Errorf("taking the credentials of user %s (uid %d): %w", acc.Name, acc.UID, err)
	}
	return fn()
}
