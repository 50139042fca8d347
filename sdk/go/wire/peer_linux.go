package wire

import (
	"fmt"
	"net"
	"syscall"
)

// checkPeer fails unless the process at the other end of the unix socket connection c
// (SO_PEERCRED, unix(7)) runs as root or as euid: a daemon is one of those, and anything else
// listening on socketPath is not the daemon (someone who could change its directory replaced
// the socket). No byte has been written on c when it is called.
func checkPeer(c net.Conn, socketPath string, euid int) error {
	cred, err := PeerCred(c)
	if err != nil {
		return fmt.Errorf("checking who serves %s: %w", socketPath, err)
	}
	if uid := int(cred.Uid); uid != 0 && uid != euid {
		return fmt.Errorf("%s is served by uid %d, neither root nor you (uid %d): not a zygo daemon you started; "+
			"refusing to talk to it (someone who can change its directory may have replaced the socket)", socketPath, cred.Uid, euid)
	}
	return nil
}

// PeerCred returns the credentials (pid, uid, gid; SO_PEERCRED, unix(7)) of the process at
// the other end of the unix socket connection c, as the kernel recorded them at connect or
// listen. Linux only; the daemon uses it too, to know who calls it.
func PeerCred(c net.Conn) (*syscall.Ucred, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("%T has no descriptor", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, cerr
	}
	return cred, nil
}
