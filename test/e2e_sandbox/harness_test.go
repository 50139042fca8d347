// Package e2esandbox drives Zygo's gVisor sandboxes end to end: the real zygo binary (daemon
// and CLI), the real zygo-guest and the real runsc. Each test runs its own daemon on a short
// temporary state dir; the tests check what is left on the host (runsc containers, processes,
// files, mounts) as well as what the CLI prints.
//
// Needs root and the pinned runsc (sudo scripts/install-runsc.sh); a missing one fails the
// tests with that command, it never skips them.
package e2esandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/network/nettest"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/test/e2eutil"
)

// zygoBin is the zygo binary under test, with zygo-guest beside it (where the daemon looks for
// the guest first); repo is the repository's root.
var (
	zygoBin string
	repo    = e2eutil.RepoRoot()
)

func TestMain(m *testing.M) {
	bin, cleanup, err := e2eutil.Build(true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	zygoBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// runscPath returns the runsc the daemon will use, failing the test (never skipping) with how
// to install it when there is none, or when we are not root.
func runscPath(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("gVisor sandboxes need root: run these tests as root (sudo go test ./test/e2e_sandbox/)")
	}
	p := "/usr/local/bin/runsc"
	if _, err := os.Stat(p); err != nil {
		if p, err = exec.LookPath("runsc"); err != nil {
			t.Fatal("runsc not found: install the pinned static build with `sudo scripts/install-runsc.sh` (or `make deps`)")
		}
	}
	return p
}

// Daemon is a `zygo serve` process on its own state dir.
type Daemon struct {
	*e2eutil.Process
	t     *testing.T
	Runsc string
	// NetTag is the daemon's --network-tag: its veths are "zy"+NetTag+"-…", its
	// namespaces "zygo"+NetTag+"-…", its nft table "zygo"+NetTag.
	NetTag string
}

// newStateDir returns a short state dir (unix socket paths under it are limited to 108 bytes).
// It is removed when the test ends, after checking nothing is mounted under it.
func newStateDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", "zsb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if m := e2eutil.MountsUnder(d); len(m) > 0 {
			t.Errorf("mounts left under the state dir: %v", m)
			for _, p := range m {
				_ = syscall.Unmount(p, syscall.MNT_DETACH)
			}
		}
		os.RemoveAll(d)
	})
	return d
}

// startDaemon starts `zygo serve` on a new state dir and waits until it answers. At the end
// of the test it removes every sandbox and checkpoint and stops the daemon.
func startDaemon(t *testing.T, args ...string) *Daemon {
	t.Helper()
	// The sandboxes' network on names and addresses of this daemon's own: tests running at
	// once on one machine (and other engineers' daemons) never sweep or share each other's.
	netTag := nettest.Tag()
	args = append([]string{"--network-tag", netTag, "--network-pool", nettest.Pool().String()}, args...)
	d := &Daemon{t: t, Runsc: runscPath(t), NetTag: netTag,
		Process: &e2eutil.Process{T: t, Bin: zygoBin, StateDir: newStateDir(t), Args: args}}
	d.Start()
	t.Cleanup(func() {
		if !d.Running() {
			d.Start() // the test stopped it: clean up through a daemon all the same
		}
		d.removeAll()
		d.Stop()
	})
	return d
}

// Start starts the daemon on d.StateDir and waits until it answers.
func (d *Daemon) Start() {
	d.t.Helper()
	d.Process.Start(60 * time.Second)
}

// Stop sends SIGTERM and waits for a clean exit (idempotent).
func (d *Daemon) Stop() { d.Process.Stop(30 * time.Second) }

// Log returns what the daemon logged so far.
func (d *Daemon) Log() string { return d.Process.Log.String() }

// removeAll removes every sandbox and then every checkpoint (children first: a checkpoint is
// referenced by the sandboxes restored from it and by its descendants).
func (d *Daemon) removeAll() {
	ctx := context.Background()
	recs, _ := d.Client.ListSandboxes(ctx)
	for i := len(recs) - 1; i >= 0; i-- {
		if err := d.Client.RemoveSandbox(ctx, recs[i].ID); err != nil {
			d.t.Errorf("cleanup: removing %s: %v", recs[i].ID, err)
		}
	}
	for range 8 { // descendants before ancestors
		cps, _ := d.Client.Checkpoints(ctx, "")
		if len(cps) == 0 {
			return
		}
		for i := len(cps) - 1; i >= 0; i-- {
			_ = d.Client.RemoveCheckpoint(ctx, cps[i].ID)
		}
	}
}

// CLI runs `zygo ARGS...` against this daemon and returns stdout, stderr and the exit code.
// It fails the test if the command takes more than 3 minutes.
func (d *Daemon) CLI(args ...string) (stdout, stderr string, code int) {
	d.t.Helper()
	return d.CLIIn("", args...)
}

// CLIIn is CLI with stdin.
func (d *Daemon) CLIIn(stdin string, args ...string) (stdout, stderr string, code int) {
	d.t.Helper()
	return d.Process.CLI(stdin, 3*time.Minute, args...)
}

// OK runs the CLI and fails the test unless it exits 0; it returns stdout, trimmed.
func (d *Daemon) OK(args ...string) string {
	d.t.Helper()
	out, errOut, code := d.CLI(args...)
	if code != 0 {
		d.t.Fatalf("zygo %s: exit %d\nstdout: %s\nstderr: %s\ndaemon log (tail):\n%s",
			strings.Join(args, " "), code, out, errOut, tail(d.Log(), 30))
	}
	return strings.TrimSpace(out)
}

// Fails runs the CLI, fails the test unless it exits non-zero, and returns stderr.
func (d *Daemon) Fails(args ...string) string {
	d.t.Helper()
	out, errOut, code := d.CLI(args...)
	if code == 0 {
		d.t.Fatalf("zygo %s succeeded, want a failure; stdout: %s", strings.Join(args, " "), out)
	}
	return errOut
}

// Sandboxes returns `zygo sandbox ls --json`.
func (d *Daemon) Sandboxes() []sandbox.SandboxRecord {
	d.t.Helper()
	var recs []sandbox.SandboxRecord
	if err := json.Unmarshal([]byte(d.OK("sandbox", "ls", "--json")), &recs); err != nil {
		d.t.Fatalf("decoding sandbox ls --json: %v", err)
	}
	return recs
}

// Record returns one sandbox's record from `zygo sandbox ls --json`.
func (d *Daemon) Record(id string) sandbox.SandboxRecord {
	d.t.Helper()
	for _, r := range d.Sandboxes() {
		if r.ID == id || r.Name == id {
			return r
		}
	}
	d.t.Fatalf("sandbox %s not listed", id)
	return sandbox.SandboxRecord{}
}

// EngineDir is the gVisor backend's state dir (the daemon's default for a short state dir).
func (d *Daemon) EngineDir() string { return filepath.Join(d.StateDir, "gv") }

// Containers returns the ids of the containers runsc still has under the daemon's root.
func (d *Daemon) Containers() []string {
	d.t.Helper()
	out, err := exec.Command(d.Runsc, "--root="+filepath.Join(d.EngineDir(), "runsc"), "list", "--format=json").Output()
	if err != nil {
		d.t.Fatalf("runsc list: %v", err)
	}
	var sts []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &sts); err != nil {
		d.t.Fatalf("decoding runsc list %q: %v", out, err)
	}
	var ids []string
	for _, s := range sts {
		ids = append(ids, s.ID)
	}
	return ids
}

// enginesProcesses returns the pids of processes whose command line names the engine dir
// (runsc's sandbox and gofer processes do, through --root).
func (d *Daemon) engineProcesses() []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(d.EngineDir()+"/")) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
