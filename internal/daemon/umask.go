package daemon

import "golang.org/x/sys/unix"

// keepReadableUmask narrows the process's umask, inherited from whoever
// started the daemon, to its write bits for group and others (umask &
// 022), and returns the umask it had.
//
// The daemon names every mode it needs: 0755 and 0444 for what a sandbox's
// uid reads (the extracted agents, a version's code, a zygote's run and
// scratch directories), 0600 for what nobody else may (zygo.db,
// secret.key). A caller's umask 077 took the read and search bits of the
// first kind away, so no Python function could be deployed (bwrap: "Can't
// find source path .../scratch/shm: Permission denied"); write bits it may
// still take. Called once, first thing in Run: the umask is the process's,
// and untrusted reads it once (it decides whether a file needs an fchmod).
func keepReadableUmask() int {
	old := unix.Umask(0o022)
	unix.Umask(old & 0o022)
	return old
}
