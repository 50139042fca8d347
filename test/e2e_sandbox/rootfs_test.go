package e2esandbox

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/zygo-run/zygo/internal/daemon"
)

// A --rootfs that reaches the daemon's own socket (here a hard link to it) must not give code
// in the sandbox the API: gVisor's --host-uds=open lets the sandbox dial any host unix socket
// in its root, and the unix socket needs no token. The sandbox's own uid cannot connect to it,
// and the daemon refuses connections from runsc processes; other callers go on working.
func TestRootfsCannotReachTheDaemon(t *testing.T) {
	d := startDaemon(t)
	root := t.TempDir()
	for _, dir := range []string{filepath.Dir(root), root} { // the sandbox's own uid reaches it
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{"usr", "tmp", "etc", "proc", "dev", "sys", "run", "root", "zygo/host"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		os.Symlink("usr/"+l, filepath.Join(root, l))
	}
	os.WriteFile(filepath.Join(root, "zygo/guest"), nil, 0o755)
	usr := filepath.Join(root, "usr")
	if err := syscall.Mount("/usr", usr, "", syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(usr, syscall.MNT_DETACH) })
	if err := os.Link(daemon.SocketPath(d.StateDir), filepath.Join(root, "daemon.sock")); err != nil {
		t.Fatal(err)
	}
	id := d.OK("sandbox", "create", "--name", "rootfs-sock", "--rootfs", root)
	out := d.OK("sandbox", "exec", id, "--", "/usr/bin/python3", "-c", `
import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("/daemon.sock")
    s.sendall(b"GET /v1/sandboxes HTTP/1.0\r\n\r\n")
    print("answer:", s.recv(100))
except OSError as e:
    print("refused:", e.__class__.__name__)`)
	if strings.Contains(out, "HTTP/1") {
		t.Fatalf("code in the sandbox reached the daemon's API: %q", out)
	}
	// The sandbox's engine runs as its own uid, which may not connect to the root-only (0600)
	// socket at all; the daemon's refusal of runsc peers (internal/daemon/peer_test.go) is the
	// second wall, for an engine running as root.
	if !strings.HasPrefix(out, "refused:") || strings.Contains(d.Log(), "refused an API connection") {
		t.Errorf("probe output %q, want the connection refused before it reaches the daemon", out)
	}
	d.OK("sandbox", "ls") // the daemon still serves its own clients
}
