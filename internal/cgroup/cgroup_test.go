package cgroup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// These tests make real cgroups and run real processes: they need root and /usr/bin/python3.

// testPython is the interpreter the tests' processes run: Debian's, as make test's agent
// tests use. Not the first python3 on PATH: a pyenv shim there is a shell script that
// spends about half a second of CPU (on a slow host) inside the group before the
// interpreter starts, which a test's CPU limit then counts.
const testPython = "/usr/bin/python3"

// newManager returns a Manager under a parent of the test's own, removed when the test ends.
func newManager(t *testing.T) *Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("cgroup tests need root (they create cgroups and move processes): run `sudo go test ./internal/cgroup`")
	}
	if _, err := os.Stat(testPython); err != nil {
		t.Fatalf("cgroup tests need %s: apt-get install -y python3 (or make deps)", testPython)
	}
	parent := fmt.Sprintf("/zygo-test-%d-%s", os.Getpid(), strings.ToLower(t.Name()))
	m, err := New(parent)
	if err != nil {
		t.Fatalf("New(%q): %v", parent, err)
	}
	t.Logf("cgroup v%d, parent %s, memsw=%v", m.Version(), parent, m.memsw)
	t.Cleanup(func() {
		if err := m.Cleanup(); err != nil {
			t.Errorf("Cleanup: %v", err)
		}
		for _, root := range uniqueRoots(m.roots) {
			if err := rmdir(filepath.Join(root, parent)); err != nil {
				t.Errorf("removing test parent: %v", err)
			}
		}
	})
	return m
}

// child is a python3 process that waits for a byte on stdin before running its script, so
// that it can be placed before it does anything.
type child struct {
	cmd   *exec.Cmd
	go_   func()
	lines chan string
	done  chan error
	ws    *syscall.WaitStatus // set by wait once the child was reaped
}

func startPython(t *testing.T, script string) *child {
	t.Helper()
	gate := "import sys, os, time\nsys.stdin.buffer.read(1)\n"
	cmd := exec.Command(testPython, "-u", "-c", gate+script)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting python3: %v", err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 16), done: make(chan error, 1)}
	c.go_ = func() {
		if _, err := stdin.Write([]byte("g")); err != nil {
			t.Fatalf("releasing child: %v", err)
		}
	}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			c.lines <- s.Text()
		}
		close(c.lines)
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		c.wait(t, 5*time.Second)
	})
	return c
}

// wait returns the child's wait status, or fails the test after d.
func (c *child) wait(t *testing.T, d time.Duration) syscall.WaitStatus {
	t.Helper()
	if c.ws != nil {
		return *c.ws
	}
	select {
	case <-c.done:
		ws := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
		c.ws = &ws
		return ws
	case <-time.After(d):
		t.Fatalf("pid %d still running after %s", c.cmd.Process.Pid, d)
		return 0
	}
}

func (c *child) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			t.Fatal("child closed stdout before printing")
		}
		return l
	case <-time.After(5 * time.Second):
		t.Fatal("no line from child in 5s")
		return ""
	}
}

func place(t *testing.T, m *Manager, name string, pid int, l Limits) *Group {
	t.Helper()
	g, err := m.Place(t.Context(), name, pid, l)
	if err != nil {
		t.Fatalf("Place(%q, %d, %+v): %v", name, pid, l, err)
	}
	t.Cleanup(func() {
		if err := g.Delete(); err != nil {
			t.Errorf("Delete: %v", err)
		}
	})
	return g
}

// assertGone fails unless rel exists in no hierarchy.
func assertGone(t *testing.T, m *Manager, rel string) {
	t.Helper()
	for _, root := range uniqueRoots(m.roots) {
		if _, err := os.Lstat(filepath.Join(root, rel)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: want it gone, stat says %v", filepath.Join(root, rel), err)
		}
	}
}

// assertEmpty fails unless cgroup.procs of g is empty in every hierarchy.
func assertEmpty(t *testing.T, g *Group) {
	t.Helper()
	for _, dir := range g.dirs() {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		if s := strings.TrimSpace(string(b)); s != "" {
			t.Errorf("%s/cgroup.procs: want empty, have %q", dir, s)
		}
	}
}

func TestMemoryHogIsOOMKilled(t *testing.T) {
	m := newManager(t)
	c := startPython(t, `
b = bytearray(300 << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
print("survived")
`)
	g := place(t, m, "fn/mem", c.cmd.Process.Pid, Limits{MemoryMiB: 256, PIDs: 64})
	c.go_()
	ws := c.wait(t, 10*time.Second)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("memory hog: want killed by SIGKILL, have %v", ws)
	}
	u, err := g.Usage()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("usage: %+v", u)
	if u.OOMKills == 0 || !u.MemoryLimitHit {
		t.Errorf("usage: want an OOM kill and the limit hit, have %+v", u)
	}
	if limit, value := g.Exceeded(); limit != "memory" || value != "256 MiB" {
		t.Errorf("Exceeded() = %q, %q; want memory, 256 MiB", limit, value)
	}
}

func TestForkBombHitsPIDs(t *testing.T) {
	m := newManager(t)
	c := startPython(t, `
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.001)
`)
	g := place(t, m, "fn/bomb", c.cmd.Process.Pid, Limits{MemoryMiB: 512, PIDs: 16})
	c.go_()
	var u Usage
	for deadline := time.Now().Add(5 * time.Second); !u.PIDsLimitHit; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pids limit not hit in 5s: %+v", u)
		}
		var err error
		if u, err = g.Usage(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("usage: %+v", u)
	if u.PIDs > 16 {
		t.Errorf("pids.current = %d, above the limit 16", u.PIDs)
	}
	if limit, value := g.Exceeded(); limit != "pids" || value != "16" {
		t.Errorf("Exceeded() = %q, %q; want pids, 16", limit, value)
	}
	if err := g.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	assertEmpty(t, g)
	if ws := c.wait(t, 5*time.Second); !ws.Signaled() {
		t.Errorf("fork bomb: want killed, have %v", ws)
	}
}

// TestEnforceKillsASpinLoop: a spin loop with a 200 ms CPU limit is killed by Enforce, which
// says why, as does Exceeded; a group without a CPU or pids limit is not watched at all.
func TestEnforceKillsASpinLoop(t *testing.T) {
	m := newManager(t)
	c := startPython(t, "while True: pass\n")
	l := Limits{MemoryMiB: 128, CPUMs: 200}
	g := place(t, m, "fn/spin", c.cmd.Process.Pid, l)
	limit := time.Duration(l.CPUMs) * time.Millisecond
	hit := make(chan string, 1)
	go func() { hit <- g.Enforce(t.Context(), 20*time.Millisecond) }()
	start := time.Now()
	c.go_()
	select {
	case why := <-hit:
		if why != "cpu" {
			t.Errorf("Enforce = %q, want cpu", why)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Enforce did not fire in 5s for a spin loop with a 200 ms limit")
	}
	t.Logf("fired after %s of wall time", time.Since(start))
	if ws := c.wait(t, 5*time.Second); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("spinner: want SIGKILL, have %v", ws)
	}
	u, err := g.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if u.CPU <= limit {
		t.Errorf("fired with CPU %s, not past %s", u.CPU, limit)
	}
	if got, value := g.Exceeded(); got != "cpu" || value != "200 ms" {
		t.Errorf("Exceeded() = %q, %q; want cpu, 200 ms", got, value)
	}
	c2 := startPython(t, "pass\n")
	free := place(t, m, "fn/free", c2.cmd.Process.Pid, Limits{MemoryMiB: 128})
	if why := free.Enforce(t.Context(), 0); why != "" {
		t.Errorf("Enforce without a CPU or pids limit = %q, want an immediate \"\"", why)
	}
	c2.go_()
	c2.wait(t, 5*time.Second)
}

func TestKillReachesGrandchildren(t *testing.T) {
	m := newManager(t)
	// The middle child forks a grandchild and exits, so the grandchild is an orphan
	// reparented away from the tree the test started.
	c := startPython(t, `
r, w = os.pipe()
mid = os.fork()
if mid == 0:
    if os.fork() == 0:
        os.write(w, b"%d\n" % os.getpid())
        time.sleep(60)
    os._exit(0)
os.waitpid(mid, 0)
print(os.read(r, 32).decode().strip())
time.sleep(60)
`)
	g := place(t, m, "fn/tree", c.cmd.Process.Pid, Limits{MemoryMiB: 128})
	c.go_()
	grandchild, err := strconv.Atoi(c.line(t))
	if err != nil {
		t.Fatal(err)
	}
	pids, err := g.procs()
	if err != nil || len(pids) != 2 {
		t.Fatalf("procs before Kill = %v, %v; want the parent and the grandchild", pids, err)
	}
	if err := g.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	assertEmpty(t, g)
	if ws := c.wait(t, 5*time.Second); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("parent: want SIGKILL, have %v", ws)
	}
	if alive(grandchild) {
		t.Errorf("grandchild %d still alive after Kill", grandchild)
	}
	if err := g.Kill(); err != nil {
		t.Errorf("Kill on an empty group: %v", err)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i:], ") Z")
}

func TestDeleteRemovesDirectories(t *testing.T) {
	m := newManager(t)
	c := startPython(t, "time.sleep(60)\n")
	g, err := m.Place(t.Context(), "fn/del", c.cmd.Process.Pid, Limits{MemoryMiB: 64, PIDs: 8})
	if err != nil {
		t.Fatal(err)
	}
	c.go_()
	for _, dir := range g.dirs() {
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("group directory missing after Place: %v", err)
		}
	}
	if err := g.Delete(); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	assertGone(t, m, g.Path())
	assertGone(t, m, filepath.Dir(g.Path())) // the empty "fn" level goes too
	if ws := c.wait(t, 5*time.Second); !ws.Signaled() {
		t.Errorf("process in deleted group: want killed, have %v", ws)
	}
	if err := g.Delete(); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if _, err := g.Usage(); err != nil {
		t.Errorf("Usage after Delete: want the last counters, have %v", err)
	}
	if limit, _ := g.Exceeded(); limit != "" {
		t.Errorf("Exceeded() after a plain kill = %q, want \"\"", limit)
	}
}

func TestPlaceMissingPIDLeavesNothing(t *testing.T) {
	m := newManager(t)
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	_, err := m.Place(t.Context(), "fn/gone", cmd.Process.Pid, Limits{MemoryMiB: 64})
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Place on exited pid %d: want ErrNotFound, have %v", cmd.Process.Pid, err)
	}
	t.Logf("error: %v", err)
	assertGone(t, m, m.parent+"/fn")
}

// TestPlaceRollsBackWhenMoveFails makes the move itself fail, after the directories and
// limits exist: kernel threads cannot be moved into a cgroup.
func TestPlaceRollsBackWhenMoveFails(t *testing.T) {
	m := newManager(t)
	kthread := kernelThread(t)
	_, err := m.Place(t.Context(), "fn/kthread", kthread, Limits{MemoryMiB: 64, PIDs: 4})
	if err == nil {
		t.Fatalf("Place moved kernel thread %d into a cgroup", kthread)
	}
	t.Logf("error: %v", err)
	assertGone(t, m, m.parent+"/fn")
}

// TestPlaceMovesBackAfterLateFailure fails Place after the process was moved into every
// hierarchy: it must go back to its old groups so that the directories can be removed.
func TestPlaceMovesBackAfterLateFailure(t *testing.T) {
	m := newManager(t)
	c := startPython(t, "time.sleep(60)\n")
	before, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", c.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	injected := errors.New("injected failure")
	m.wrapAdd = func(add func(uint64) error) func(uint64) error {
		return func(pid uint64) error {
			if err := add(pid); err != nil {
				t.Fatalf("moving pid in: %v", err)
			}
			return injected
		}
	}
	if _, err := m.Place(t.Context(), "fn/late", c.cmd.Process.Pid, Limits{MemoryMiB: 64}); !errors.Is(err, injected) {
		t.Fatalf("Place: want the injected error, have %v", err)
	}
	after, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", c.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Errorf("process not moved back:\nbefore:\n%safter:\n%s", before, after)
	}
	assertGone(t, m, m.parent+"/fn")
}

// kernelThread returns the pid of a kernel thread (PF_KTHREAD in /proc/<pid>/stat flags).
func kernelThread(t *testing.T) int {
	t.Helper()
	const pfKthread = 0x00200000
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 7 {
			continue
		}
		if flags, err := strconv.ParseUint(fields[6], 10, 64); err == nil && flags&pfKthread != 0 {
			return pid
		}
	}
	t.Fatal("no kernel thread visible in /proc: run the tests in the host pid namespace")
	return 0
}

func TestPlaceValidates(t *testing.T) {
	m := newManager(t)
	pid := os.Getpid()
	for _, name := range []string{"", "/fn/req", "fn/../req", "..", "fn//req", "fn/./req", "fn/req/"} {
		if _, err := m.Place(t.Context(), name, pid, Limits{MemoryMiB: 64}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Place(name %q): want ErrInvalidArgument, have %v", name, err)
		}
	}
	for _, l := range []Limits{{}, {MemoryMiB: -1}, {MemoryMiB: 64, PIDs: -1}, {MemoryMiB: 64, CPUMs: -1}} {
		if _, err := m.Place(t.Context(), "fn/req", pid, l); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Place(limits %+v): want ErrInvalidArgument, have %v", l, err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := m.Place(ctx, "fn/req", pid, Limits{MemoryMiB: 64}); !errors.Is(err, context.Canceled) {
		t.Errorf("Place with a cancelled ctx: want context.Canceled, have %v", err)
	}
	for _, parent := range []string{"zygo", "/", "/a/../b", "/sys/fs/cgroup/x"} {
		if _, err := New(parent); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("New(%q): want ErrInvalidArgument, have %v", parent, err)
		}
	}
	assertGone(t, m, m.parent+"/fn")

	c := startPython(t, "time.sleep(60)\n")
	place(t, m, "fn/dup", c.cmd.Process.Pid, Limits{MemoryMiB: 64})
	if _, err := m.Place(t.Context(), "fn/dup", c.cmd.Process.Pid, Limits{MemoryMiB: 64}); !errors.Is(err, errdefs.ErrExists) {
		t.Errorf("Place on an existing group: want ErrExists, have %v", err)
	}
}

func TestCleanupRemovesLeftovers(t *testing.T) {
	m := newManager(t)
	c := startPython(t, "time.sleep(60)\n")
	g, err := m.Place(t.Context(), "fn/stale", c.cmd.Process.Pid, Limits{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	c.go_()
	// A new daemon after a crash: a fresh Manager on the same parent.
	m2, err := New(m.parent)
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Cleanup(); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	assertGone(t, m, g.Path())
	assertGone(t, m, m.parent+"/fn")
	if ws := c.wait(t, 5*time.Second); !ws.Signaled() {
		t.Errorf("leftover process: want killed, have %v", ws)
	}
}

// TestCloseRemovesParent: at shutdown nothing of the daemon's is left in
// any hierarchy, not even its parent directory.
func TestCloseRemovesParent(t *testing.T) {
	m := newManager(t)
	c := startPython(t, "time.sleep(60)\n")
	if _, err := m.Place(t.Context(), "fn/req", c.cmd.Process.Pid, Limits{MemoryMiB: 64}); err != nil {
		t.Fatal(err)
	}
	c.go_()
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	assertGone(t, m, m.parent)
	if ws := c.wait(t, 5*time.Second); !ws.Signaled() {
		t.Errorf("process left in the group: want killed, have %v", ws)
	}
}

// Add moves a second process into a group made by Place; both count in its
// pids and are killed by Delete. A gone process is ErrNotFound.
func TestAddMovesAnotherProcess(t *testing.T) {
	m := newManager(t)
	a := startPython(t, "time.sleep(60)\n")
	b := startPython(t, "time.sleep(60)\n")
	g := place(t, m, "fn/z", a.cmd.Process.Pid, Limits{MemoryMiB: 64, PIDs: 8})
	if err := g.Add(b.cmd.Process.Pid); err != nil {
		t.Fatalf("Add: %v", err)
	}
	// (Look only for these two: the interpreter may start helpers of its own.)
	pids, err := g.procs()
	if err != nil || !slices.Contains(pids, a.cmd.Process.Pid) || !slices.Contains(pids, b.cmd.Process.Pid) {
		t.Fatalf("procs after Add: %v, %v; want %d and %d in them", pids, err, a.cmd.Process.Pid, b.cmd.Process.Pid)
	}
	if err := g.Add(0); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Add(0): %v, want ErrInvalidArgument", err)
	}
	if err := g.Delete(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*child{a, b} {
		if ws := c.wait(t, 10*time.Second); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("pid %d after Delete: %v, want SIGKILL", c.cmd.Process.Pid, ws)
		}
	}
	if err := g.Add(b.cmd.Process.Pid); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Add to a deleted group: %v, want ErrNotFound", err)
	}
}
