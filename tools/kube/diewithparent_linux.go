package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// init asks the kernel to kill this process when the process that started it exits: a test
// binary that dies (a panic, go test's -timeout, a SIGKILL) must not leave a kube-apiserver
// or an etcd behind, and envtest starts both in process groups of their own, out of reach of
// a signal to the test's group. It runs in init because the setting belongs to the thread
// that asks, and during init the main goroutine is locked to the main thread, the one the
// kernel consults. SIGKILL: the parent is gone, so nothing is left to shut down gracefully
// for (envtest's own Stop sends SIGTERM first and waits).
func init() {
	parent := os.Getppid()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return // best effort: the kernel refuses only on a bad signal number
	}
	if os.Getppid() != parent { // the parent exited before the request took effect
		os.Exit(1)
	}
}
