package nsbox

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoUserNamespaceInsideWithoutTheFilter runs the real bwrap command line
// (baseArgs) without the seccomp filter: --disable-userns alone must make
// unshare(CLONE_NEWUSER) fail (ENOSPC: user.max_user_namespaces is 1 and the
// agent is in a nested user namespace that cannot raise it).
func TestNoUserNamespaceInsideWithoutTheFilter(t *testing.T) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		t.Fatalf("bwrap not found: install it with `apt-get install -y bubblewrap` (or `make deps`)")
	}
	dir := t.TempDir()
	spec := Spec{Bwrap: bwrap, Interpreter: "/usr/bin/python3", EtcDir: filepath.Join(dir, "etc"),
		CodeDir: t.TempDir(), AgentDir: t.TempDir(), ReqDir: t.TempDir(), TmpDir: t.TempDir()}
	if err := WriteEtc(spec.EtcDir); err != nil {
		t.Fatal(err)
	}
	script := `import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
r = libc.unshare(0x10000000)
print("unshare_newuser", "ok" if r == 0 else errno.errorcode.get(ctypes.get_errno()))`
	args := append(baseArgs(spec), "--", spec.Interpreter, "-c", script)
	out, err := exec.Command(bwrap, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("bwrap: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "unshare_newuser ENOSPC\n") {
		t.Errorf("want unshare(CLONE_NEWUSER) refused with ENOSPC by --disable-userns alone, got:\n%s", out)
	}
}
