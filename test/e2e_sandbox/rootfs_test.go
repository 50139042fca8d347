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
// in its root, and the unix socket needs no token. The daemon refuses connections from runsc
// processes; other callers go on working.
func TestRootfsCannotReachTheDaemon(t *testing.T) {
	d := startDaemon(t)
	root := t.TempDir()
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
	if !strings.Contains(out, "refused") && !strings.Contains(out, "answer: b''") {
		t.Errorf("unexpected probe output %q", out)
	}
	if !strings.Contains(d.Log(), "refused an API connection from a gVisor sandbox") {
		t.Errorf("the daemon did not log the refusal")
	}
	d.OK("sandbox", "ls") // the daemon still serves its own clients
}
