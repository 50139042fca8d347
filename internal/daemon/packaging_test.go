package daemon

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeInstall runs `make install` into a temporary prefix: the three binaries side by
// side (where the daemon looks for zygo-guest and zygo_rand.so), and the systemd unit with
// the prefix filled in, keeping sandboxes alive across a restart (KillMode=process), which
// systemd-analyze verify accepts.
func TestMakeInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make not found: apt-get install -y make")
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze not found: apt-get install -y systemd")
	}
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	prefix := t.TempDir()
	cmd := exec.Command("make", "install", "PREFIX="+prefix, "BIN="+filepath.Join(t.TempDir(), "bin"))
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	for name, mode := range map[string]os.FileMode{"bin/zygo": 0o755, "bin/zygo-guest": 0o755, "bin/" + RandGuardName: 0o644,
		"lib/systemd/system/zygo.service": 0o644} {
		st, err := os.Stat(filepath.Join(prefix, name))
		if err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: %v, mode %v; want mode %v", name, err, st.Mode().Perm(), mode)
		}
	}
	unit := filepath.Join(prefix, "lib", "systemd", "system", "zygo.service")
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nExecStart=" + prefix + "/bin/zygo serve\n", "\nKillMode=process\n", "\nDelegate=yes\n", "\nStateDirectory=zygo\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the installed unit lacks %q:\n%s", strings.TrimSpace(want), b)
		}
	}
	if strings.Contains(string(b), "@PREFIX@") {
		t.Errorf("the installed unit still says @PREFIX@")
	}
	if out, err := exec.Command(analyze, "verify", unit).CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
	}
}
