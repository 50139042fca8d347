package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/hostid"
)

// hostUIDs returns the host uid of each loaded function's zygote, by name.
func (d *Daemon) hostUIDs(t *testing.T) map[string]uint32 {
	t.Helper()
	st, err := d.Client.Functions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint32{}
	for _, s := range st {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.ZygotePID))
		if err != nil {
			t.Fatalf("zygote of %s (pid %d): %v", s.Name, s.ZygotePID, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				u, _ := strconv.ParseUint(f[1], 10, 32)
				out[s.Name] = uint32(u)
			}
		}
	}
	return out
}

// readAs runs cat on path as uid:gid (no supplementary groups) and reports
// whether it read the file.
func readAs(t *testing.T, uid uint32, path string) bool {
	t.Helper()
	cmd := exec.Command("/usr/bin/cat", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if err != nil && !strings.Contains(errb.String(), "Permission denied") {
		t.Fatalf("cat %s as %d: %v %s", path, uid, err, errb.String())
	}
	return err == nil
}

// Two functions run as two different host uids of the daemon's range (never
// nobody), keep them across a restart, and each one's code is readable by
// its own uid only: not by the other function's, not by nobody's.
func TestFunctionsRunAsUIDsOfTheirOwn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: run it as root (the daemon switches uids only as root)")
	}
	d := startDaemon(t, "")
	d.setSecret(t, "API_KEY", "uid-test")
	d.Up(fixture("secretfn"))
	d.Up(fixture("nosecretfn"))
	uids := d.hostUIDs(t)
	a, b := uids["secretfn"], uids["nosecretfn"]
	// The daemon claims a block of 65536 of the auto window (another daemon
	// of the host may hold the first).
	block := func(id uint32) int64 { return (int64(id) - int64(hostid.Default.First)) / int64(hostid.Default.Count) }
	if a == b || a == 65534 || b == 65534 || a < hostid.Default.First || block(a) != block(b) || block(a) >= hostid.AutoBlocks {
		t.Fatalf("host uids: secretfn %d, nosecretfn %d; want two different uids of one block of %d ids from %d",
			a, b, hostid.Default.Count, hostid.Default.First)
	}
	code := func(name string) string {
		m, _ := filepath.Glob(filepath.Join(d.StateDir, "versions", name, "*", "main.py"))
		if len(m) != 1 {
			t.Fatalf("code of %s: %v", name, m)
		}
		return m[0]
	}
	for _, c := range []struct {
		name       string
		own, other uint32
	}{{"secretfn", a, b}, {"nosecretfn", b, a}} {
		p := code(c.name)
		if !readAs(t, c.own, p) {
			t.Errorf("%s cannot read its own code as uid %d", c.name, c.own)
		}
		if readAs(t, c.other, p) {
			t.Errorf("%s's code is readable by the other function's uid %d", c.name, c.other)
		}
		if readAs(t, 65534, p) {
			t.Errorf("%s's code is readable by nobody", c.name)
		}
	}
	d.Stop()
	d2 := startDaemon(t, d.StateDir)
	d2.Invoke("secretfn", map[string]any{"action": "import"}, nil)
	d2.Invoke("nosecretfn", map[string]any{}, nil)
	if again := d2.hostUIDs(t); again["secretfn"] != a || again["nosecretfn"] != b {
		t.Errorf("after a restart the uids are %v, want secretfn %d nosecretfn %d", again, a, b)
	}
}

// memoryFS reports whether path is on a filesystem whose pages never go to
// a disk: tmpfs or ramfs.
func memoryFS(path string) bool {
	var s unix.Statfs_t
	if unix.Statfs(path, &s) != nil {
		return false
	}
	return s.Type == unix.TMPFS_MAGIC || s.Type == unix.RAMFS_MAGIC
}

// filesHolding walks root and returns every regular file on a filesystem
// other than tmpfs or ramfs that contains value.
func filesHolding(t *testing.T, root, value string) []string {
	t.Helper()
	var found []string
	_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone meanwhile, or another tool's private dir
		}
		if e.IsDir() && memoryFS(p) {
			return filepath.SkipDir
		}
		if !e.Type().IsRegular() {
			return nil
		}
		if info, err := e.Info(); err != nil || info.Size() > 256<<20 {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(value)) {
			found = append(found, p)
		}
		return nil
	})
	return found
}

// While a request holds a secret (its handler sleeps with /run/secrets
// populated), no file on a disk-backed filesystem under the state dir or the
// host's /tmp holds the value; the zygote's run directory is a tmpfs, and
// once the function is removed no mount is left below the state dir's run/.
func TestSecretsNeverOnDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: run it as root (the daemon mounts tmpfs only as root)")
	}
	d := startDaemon(t, "")
	if memoryFS(d.StateDir) {
		t.Fatalf("the state dir %s is on a tmpfs: this test needs it on a disk filesystem", d.StateDir)
	}
	value := fmt.Sprintf("zygo-secret-%d-never-on-disk", time.Now().UnixNano())
	d.setSecret(t, "API_KEY", value)
	d.Up(fixture("secretfn"))
	done := make(chan error, 1)
	go func() {
		_, err := d.TryInvoke("secretfn", map[string]any{"action": "hold", "seconds": 8})
		done <- err
	}()
	var secretFile string
	for deadline := time.Now().Add(20 * time.Second); secretFile == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(d.StateDir, "run", "*", "secrets", "API_KEY")); len(m) > 0 {
			secretFile = m[0]
		}
	}
	if secretFile == "" {
		t.Fatalf("the request's secret file never appeared under %s/run", d.StateDir)
	}
	// First the file itself, while the request surely holds it; then the walks, which can
	// take seconds on a machine whose /tmp holds much (the request may have ended by then).
	if !memoryFS(secretFile) {
		var st unix.Statfs_t
		err := unix.Statfs(secretFile, &st)
		t.Errorf("the secret file %s is not on a tmpfs (statfs: type %#x, %v)", secretFile, st.Type, err)
	}
	for _, root := range []string{d.StateDir, os.TempDir()} {
		if found := filesHolding(t, root, value); len(found) > 0 {
			t.Errorf("during the request the secret's value is in files on a disk filesystem: %v", found)
		}
	}
	mounts, err := agentproc.MountsBelow(filepath.Join(d.StateDir, "run"))
	if err != nil || len(mounts) == 0 {
		t.Errorf("mounts below run/ during the request: %v %v, want the zygote's tmpfs", mounts, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the holding request: %v", err)
	}
	if _, errOut, code := d.CLI("rm", "secretfn"); code != 0 {
		t.Fatalf("zygo rm: %s", errOut)
	}
	if mounts, err := agentproc.MountsBelow(filepath.Join(d.StateDir, "run")); err != nil || len(mounts) != 0 {
		t.Errorf("mounts left below run/ after the zygote stopped: %v %v", mounts, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(d.StateDir, "run")); len(ents) != 0 {
		t.Errorf("run/ holds %d entries after the zygote stopped", len(ents))
	}
}

// A daemon killed with SIGKILL leaves its zygotes' tmpfs mounted; the next
// one on the same state dir unmounts them before it starts any zygote.
func TestStaleRunMountsAreRemovedAtStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: run it as root (the daemon mounts tmpfs only as root)")
	}
	d := startDaemon(t, "")
	d.Up(fixture("nosecretfn"))
	run := filepath.Join(d.StateDir, "run")
	stale, err := agentproc.MountsBelow(run)
	if err != nil || len(stale) == 0 {
		t.Fatalf("mounts below run/ with a zygote up: %v %v", stale, err)
	}
	_ = d.Cmd.Process.Kill()
	_ = d.Cmd.Wait()
	d2 := startDaemon(t, d.StateDir)
	d2.Invoke("nosecretfn", map[string]any{}, nil)
	now, err := agentproc.MountsBelow(run)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range now {
		for _, s := range stale {
			if m == s {
				t.Errorf("the killed daemon's mount %s is still there after a restart", m)
			}
		}
	}
	if _, err := os.Stat(stale[0]); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the killed daemon's run dir %s: %v, want it removed", stale[0], err)
	}
	d2.Stop()
	if left, _ := agentproc.MountsBelow(run); len(left) != 0 {
		t.Errorf("mounts left after a clean stop: %v", left)
	}
}
