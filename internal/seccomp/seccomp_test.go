package seccomp

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDefaultFilterUnderBwrap loads the default filter through bubblewrap, as
// the ns backend does, and checks that a denied syscall fails with EPERM
// while ordinary work still succeeds.
func TestDefaultFilterUnderBwrap(t *testing.T) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		t.Fatalf("bwrap not found: install it with `apt-get install -y bubblewrap` (or `make deps`)")
	}
	prog, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	if len(prog)%8 != 0 || len(prog) < 8*len(DefaultDenied) {
		t.Fatalf("program of %d bytes is not a plausible sock_filter array", len(prog))
	}
	f, err := os.CreateTemp("", "seccomp")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	f.Write(prog)
	f.Seek(0, 0)
	script := `
import ctypes, os, errno
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(165, b"none", b"/tmp", b"tmpfs", 0, None)  # mount(2) on x86_64
print("mount", r, errno.errorcode.get(ctypes.get_errno()))
r = libc.syscall(272, 0)  # unshare(0)
print("unshare", r, errno.errorcode.get(ctypes.get_errno()))
print("getpid-ok", os.getpid() > 0)
`
	cmd := exec.Command(bwrap, "--unshare-user", "--unshare-pid", "--ro-bind", "/usr", "/usr",
		"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
		"--proc", "/proc", "--dev", "/dev", "--seccomp", "3", "/usr/bin/python3", "-c", script)
	cmd.ExtraFiles = []*os.File{f}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bwrap: %v\n%s", err, out)
	}
	for _, want := range []string{"mount -1 EPERM", "unshare -1 EPERM", "getpid-ok True"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
