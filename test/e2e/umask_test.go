package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/test/e2eutil"
)

// TestDaemonStartedUnderUmask077: a daemon started with umask 077 (a hardened
// shell, systemd's UMask=0077) still deploys and serves a Python function:
// it keeps the read and search bits of the modes it names (the sandbox's
// uid reads the agents, the code and its run directory), while what only
// the daemon may read stays 0600. Before, the deploy failed in bwrap
// ("Can't find source path .../scratch/shm: Permission denied").
func TestDaemonStartedUnderUmask077(t *testing.T) {
	requireTools(t)
	wrapper := filepath.Join(t.TempDir(), "zygo-umask-077")
	script := "#!/bin/sh\numask 077\nexec " + zygoBin + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	state, err := os.MkdirTemp("", "zygo-e2e-state-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	d := &Daemon{t: t, Process: &e2eutil.Process{T: t, Bin: wrapper, StateDir: state}}
	d.Start(20 * time.Second)
	t.Cleanup(d.Stop)

	status, err := os.ReadFile("/proc/" + strconv.Itoa(d.Cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(status), "Umask:\t0022\n") {
		t.Errorf("the daemon's umask after start: want 0022 (077 & 022); /proc/PID/status:\n%s", status)
	}
	d.Up(fixture("probe"))
	var r struct {
		Random float64 `json:"random"`
		PID    int     `json:"pid"`
	}
	d.Invoke("probe", map[string]any{"action": "rng"}, &r)
	if r.PID == 0 {
		t.Fatalf("the probe answered without its pid: %+v", r)
	}
	// -wal and -shm are made by SQLite as it runs (with the database's mode), not by an
	// explicit 0600 of ours: what a looser umask would show first.
	for _, name := range []string{"zygo.db", "zygo.db-wal", "zygo.db-shm", "secret.key"} {
		fi, err := os.Stat(filepath.Join(state, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %o under the narrowed umask, want 0600", name, fi.Mode().Perm())
		}
	}
	if !strings.Contains(d.Log.String(), "umask narrowed") {
		t.Errorf("the daemon did not say it narrowed its umask; its log:\n%s", d.Log.String())
	}
}
