package daemon

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// runscGuard wraps the daemon's unix socket listener and closes, before any byte is read,
// connections whose peer (SO_PEERCRED, unix(7)) runs the runsc binary: a gVisor sandbox or
// gofer. Sandboxes dial host unix sockets through runsc's --host-uds=open, which the guest
// channel needs; a --rootfs that contains the daemon's socket (a hard link, a bind) would
// otherwise let code in a sandbox call the API, which needs no token on the unix socket.
type runscGuard struct {
	net.Listener
	runsc     os.FileInfo // the runsc binary; peers whose /proc/PID/exe is this file are refused
	runscPath string      // its path: a binary replaced since (install-runsc.sh) is matched by it
	log       *slog.Logger
	last      time.Time // of the last warning (Accept is called from one goroutine)
}

// guardAgainstRunsc returns l wrapped by a runscGuard, or l itself when runscPath is empty or
// cannot be stat'ed (no sandboxes here: nothing to guard against).
func guardAgainstRunsc(l net.Listener, runscPath string, log *slog.Logger) net.Listener {
	if runscPath == "" {
		return l
	}
	fi, err := os.Stat(runscPath)
	if err != nil {
		return l
	}
	if real, err := filepath.EvalSymlinks(runscPath); err == nil { // /proc/PID/exe shows it resolved
		runscPath = real
	}
	return &runscGuard{Listener: l, runsc: fi, runscPath: runscPath, log: log}
}

// Accept returns the next connection whose peer is not a runsc process.
func (g *runscGuard) Accept() (net.Conn, error) {
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			return nil, err
		}
		pid, err := peerPID(c)
		if err == nil && g.isRunsc(pid) {
			if time.Since(g.last) > time.Minute {
				g.last = time.Now()
				g.log.Warn("refused an API connection from a gVisor sandbox (its rootfs reaches the daemon's socket)", "pid", pid)
			}
			c.Close()
			continue
		}
		return c, nil
	}
}

func (g *runscGuard) isRunsc(pid int32) bool {
	exe := fmt.Sprintf("/proc/%d/exe", pid)
	if fi, err := os.Stat(exe); err == nil && os.SameFile(fi, g.runsc) {
		return true
	}
	// The binary may have been replaced while the daemon runs: the link then names the path
	// (with " (deleted)" for processes of the old one).
	target, err := os.Readlink(exe)
	return err == nil && strings.TrimSuffix(target, " (deleted)") == g.runscPath
}

// peerPID returns the pid of the process at the other end of a unix socket connection.
func peerPID(c net.Conn) (int32, error) {
	cred, err := wire.PeerCred(c)
	if err != nil {
		return 0, err
	}
	return cred.Pid, nil
}
