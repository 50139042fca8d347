package cgroup

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// placePooled is PlacePooled failing the test on error.
func placePooled(t *testing.T, m *Manager, pid int, l Limits) *Group {
	t.Helper()
	g, err := m.PlacePooled(t.Context(), "fn", pid, l)
	if err != nil {
		t.Fatalf("PlacePooled(%d, %+v): %v", pid, l, err)
	}
	return g
}

// TestReleasedGroupIsReusedWithItsLimits: a group whose process exited cleanly is kept by
// Release and given to the next request with the same limits, its counters counting only
// that request; its memory limit still kills a hog, and a group whose limit was hit is
// deleted rather than kept.
func TestReleasedGroupIsReusedWithItsLimits(t *testing.T) {
	m := newManager(t)
	l := Limits{MemoryMiB: 128, PIDs: 16, CPUMs: 5000}
	c1 := startPython(t, "x = sum(range(3_000_000))\n")
	g1 := placePooled(t, m, c1.cmd.Process.Pid, l)
	c1.go_()
	if ws := c1.wait(t, 10*time.Second); ws.ExitStatus() != 0 {
		t.Fatalf("first request: %v", ws)
	}
	if u, err := g1.Usage(); err != nil || u.CPU < 10*time.Millisecond {
		t.Fatalf("first request's usage %+v, %v: want some CPU", u, err)
	}
	if !g1.Empty() {
		t.Fatal("Empty() = false for a group whose one process exited and was waited for")
	}
	if err := g1.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	c2 := startPython(t, `
b = bytearray(200 << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
`)
	g2 := placePooled(t, m, c2.cmd.Process.Pid, l)
	if g2.Path() != g1.Path() {
		t.Fatalf("second group %s, want the released %s reused", g2.Path(), g1.Path())
	}
	u, err := g2.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if u.CPU > 5*time.Millisecond || u.OOMKills != 0 || u.PIDsLimitHit {
		t.Errorf("reused group's usage before its request: %+v, want the first request's counters gone", u)
	}
	c2.go_()
	if ws := c2.wait(t, 10*time.Second); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("memory hog in a reused group: want SIGKILL, have %v", ws)
	}
	if limit, _ := g2.Exceeded(); limit != "memory" {
		t.Errorf("Exceeded() = %q, want memory", limit)
	}
	if err := g2.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	assertGone(t, m, g2.Path())
	c3 := startPython(t, "pass\n")
	g3 := placePooled(t, m, c3.cmd.Process.Pid, l)
	if g3.Path() == g2.Path() {
		t.Errorf("a group whose memory limit killed its request was reused")
	}
	c3.go_()
	c3.wait(t, 5*time.Second)
	if err := g3.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseDeletesGroupWithLeftovers: a request that leaves a process behind does not
// leave it in a kept group: Release kills it and removes the group.
func TestReleaseDeletesGroupWithLeftovers(t *testing.T) {
	m := newManager(t)
	c := startPython(t, `
if os.fork() == 0:
    os.close(1)
    time.sleep(60)
print("forked")
`)
	g := placePooled(t, m, c.cmd.Process.Pid, Limits{MemoryMiB: 64, PIDs: 8})
	c.go_()
	c.line(t)
	c.wait(t, 5*time.Second)
	pids, err := g.procs()
	if err != nil || len(pids) != 1 {
		t.Fatalf("procs = %v, %v; want the orphan", pids, err)
	}
	if g.Empty() {
		t.Fatal("Empty() = true for a group holding an orphan")
	}
	if err := g.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	assertGone(t, m, g.Path())
	if alive(pids[0]) {
		t.Errorf("the request's orphan %d is alive after Release", pids[0])
	}
}

// TestGroupThatHitPIDsIsNotKept: a request refused a fork by its pids limit leaves its
// group marked (pids.events cannot be reset), so Release deletes it rather than keeping it.
func TestGroupThatHitPIDsIsNotKept(t *testing.T) {
	m := newManager(t)
	c := startPython(t, `
kids = []
for _ in range(32):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(0.5)
        os._exit(0)
    kids.append(pid)
for k in kids:
    os.waitpid(k, 0)
`)
	g := placePooled(t, m, c.cmd.Process.Pid, Limits{MemoryMiB: 64, PIDs: 8})
	c.go_()
	c.wait(t, 10*time.Second)
	if limit, _ := g.Exceeded(); limit != "pids" {
		t.Fatalf("Exceeded() = %q, want pids", limit)
	}
	if err := g.Release(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, m, g.Path())
}

// TestDropPooledDeletesKeptGroups: the groups kept for a removed function are deleted with
// the function's level, and one released after the drop is deleted too, not kept.
func TestDropPooledDeletesKeptGroups(t *testing.T) {
	m := newManager(t)
	l := Limits{MemoryMiB: 64, PIDs: 8}
	c1, c2 := startPython(t, "pass\n"), startPython(t, "pass\n")
	g1, g2 := placePooled(t, m, c1.cmd.Process.Pid, l), placePooled(t, m, c2.cmd.Process.Pid, l)
	c1.go_()
	c2.go_()
	c1.wait(t, 5*time.Second)
	c2.wait(t, 5*time.Second)
	if err := g1.Release(); err != nil {
		t.Fatal(err)
	}
	if err := m.DropPooled("fn"); err != nil {
		t.Fatalf("DropPooled: %v", err)
	}
	assertGone(t, m, g1.Path())
	if err := g2.Release(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, m, m.parent+"/fn")
}

// TestGroupStillChargedIsNotKept: a request that exits cleanly but leaves 30 MiB in a
// tmpfs file (the zygote's /dev/shm outlives its requests) leaves that memory charged to
// its group; Release deletes such a group (the kernel moves the charge to the parent)
// instead of handing it, 30 MiB full, to the next request under the same limit. A group
// whose request left nothing behind is still kept.
func TestGroupStillChargedIsNotKept(t *testing.T) {
	m := newManager(t)
	l := Limits{MemoryMiB: 64, PIDs: 8}
	shm := filepath.Join("/dev/shm", "zygo-cgroup-test-"+t.Name())
	t.Cleanup(func() { os.Remove(shm) })
	c := startPython(t, "f = open("+pyQuote(shm)+", 'wb')\nfor _ in range(30):\n    f.write(b'x' * (1 << 20))\nf.close()\n")
	g := placePooled(t, m, c.cmd.Process.Pid, l)
	c.go_()
	if ws := c.wait(t, 10*time.Second); ws.ExitStatus() != 0 {
		t.Fatalf("request: %v", ws)
	}
	if n, err := g.memoryCharge(); err != nil || n < 20<<20 {
		t.Fatalf("charge after the request: %d, %v; want the tmpfs file's 30 MiB", n, err)
	}
	if err := g.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	assertGone(t, m, g.Path())

	c2 := startPython(t, "pass\n")
	g2 := placePooled(t, m, c2.cmd.Process.Pid, l)
	c2.go_()
	c2.wait(t, 10*time.Second)
	n, err := g2.memoryCharge()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a request that left nothing: %d bytes still charged (kept at most %d)", n, keepMaxChargeBytes)
	if err := g2.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	c3 := startPython(t, "pass\n")
	if g3 := placePooled(t, m, c3.cmd.Process.Pid, l); g3.Path() != g2.Path() {
		t.Errorf("a group left empty and uncharged was not reused: %s, want %s", g3.Path(), g2.Path())
	}
	c3.go_()
	c3.wait(t, 10*time.Second)
}

func pyQuote(s string) string { return "'" + s + "'" }

// TestBeginCountsCPUFromTheRequest: a process placed in its group ahead of its request (a
// pre-forked child waiting in the pool) that used more CPU there than the request's cpu_ms
// before Begin is not charged with it: after Begin, Usage counts none of it, Enforce leaves
// the process alone and its request ends cleanly, and Exceeded names no limit.
func TestBeginCountsCPUFromTheRequest(t *testing.T) {
	m := newManager(t)
	l := Limits{MemoryMiB: 128, PIDs: 16, CPUMs: 300}
	c := startPython(t, `
t0 = time.process_time()
while time.process_time() - t0 < 0.4:
    pass
print("idle", flush=True)
sys.stdin.buffer.read(1)
`)
	g := placePooled(t, m, c.cmd.Process.Pid, l)
	c.go_()
	if line := c.line(t); line != "idle" {
		t.Fatalf("child printed %q, want idle", line)
	}
	if u, err := g.Usage(); err != nil || u.CPU < 400*time.Millisecond {
		t.Fatalf("usage before Begin %+v, %v: want the 400 ms the child burnt", u, err)
	}
	if err := g.Begin(); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	u, err := g.Usage()
	if err != nil || u.CPU > 100*time.Millisecond {
		t.Fatalf("usage after Begin %+v, %v: want the waiting child's CPU only (about none)", u, err)
	}
	ctx, stop := context.WithCancel(t.Context())
	hit := make(chan string, 1)
	go func() { hit <- g.Enforce(ctx, 10*time.Millisecond) }()
	c.go_()
	if ws := c.wait(t, 10*time.Second); ws.ExitStatus() != 0 || ws.Signaled() {
		t.Fatalf("request after Begin: %v, want a clean exit", ws)
	}
	stop()
	if why := <-hit; why != "" {
		t.Errorf("Enforce = %q, want no limit hit", why)
	}
	if limit, value := g.Exceeded(); limit != "" {
		t.Errorf("Exceeded() = %q, %q; want none", limit, value)
	}
	if err := g.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestHeldGroupCountsCPUFromBegin: a kept v1 group's cpuacct.usage is reset once per
// request, at the point its count starts. A group held for a child (HoldPooled) whose
// earlier requests' CPU adds up past cpu_ms counts none of it after Begin, and is kept
// again; a held child given back without a request, though it burnt more than cpu_ms while
// waiting, does not get its group deleted for it; and the next PlacePooled of that group
// counts from its placement.
func TestHeldGroupCountsCPUFromBegin(t *testing.T) {
	m := newManager(t)
	l := Limits{MemoryMiB: 128, PIDs: 16, CPUMs: 600}
	burn := func(s float64) string {
		return fmt.Sprintf("t0 = time.process_time()\nwhile time.process_time() - t0 < %g:\n    pass\n", s)
	}
	c1 := startPython(t, burn(0.3))
	g1 := placePooled(t, m, c1.cmd.Process.Pid, l)
	c1.go_()
	if ws := c1.wait(t, 10*time.Second); ws.ExitStatus() != 0 {
		t.Fatalf("first request: %v", ws)
	}
	if err := g1.Release(); err != nil {
		t.Fatal(err)
	}

	c2 := startPython(t, burn(0.35)+"print('idle', flush=True)\nsys.stdin.buffer.read(1)\n")
	g2, err := m.HoldPooled(t.Context(), "fn", c2.cmd.Process.Pid, l)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Path() != g1.Path() {
		t.Fatalf("held group %s, want the released %s reused", g2.Path(), g1.Path())
	}
	c2.go_()
	if line := c2.line(t); line != "idle" {
		t.Fatalf("child printed %q, want idle", line)
	}
	if err := g2.Begin(); err != nil {
		t.Fatal(err)
	}
	if u, err := g2.Usage(); err != nil || u.CPU > 100*time.Millisecond {
		t.Fatalf("usage after Begin %+v, %v: want neither the first request's CPU nor the wait's", u, err)
	}
	c2.go_()
	if ws := c2.wait(t, 10*time.Second); ws.ExitStatus() != 0 {
		t.Fatalf("second request: %v", ws)
	}
	if limit, _ := g2.Exceeded(); limit != "" {
		t.Errorf("Exceeded() = %q, want none", limit)
	}
	if done, err := g2.TryRelease(); !done || err != nil {
		t.Fatalf("TryRelease of an empty group = %v, %v; want it released", done, err)
	}

	c3 := startPython(t, burn(0.7))
	g3, err := m.HoldPooled(t.Context(), "fn", c3.cmd.Process.Pid, l)
	if err != nil {
		t.Fatal(err)
	}
	if g3.Path() != g1.Path() {
		t.Fatalf("held group %s, want %s reused", g3.Path(), g1.Path())
	}
	c3.go_()
	c3.wait(t, 10*time.Second)
	if err := g3.Release(); err != nil { // dropped: no request began
		t.Fatal(err)
	}

	c4 := startPython(t, "pass\n")
	g4 := placePooled(t, m, c4.cmd.Process.Pid, l)
	if g4.Path() != g1.Path() {
		t.Fatalf("group %s, want %s kept after a held child's wait", g4.Path(), g1.Path())
	}
	if u, err := g4.Usage(); err != nil || u.CPU > 5*time.Millisecond {
		t.Errorf("reused group's usage at its placement %+v, %v; want earlier requests' CPU gone", u, err)
	}
	c4.go_()
	c4.wait(t, 10*time.Second)
	if err := g4.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestKeptControlFilesReadFreshAndClose: a pooled group keeps its control files open and
// reads each again at offset 0, so a counter read twice through the same descriptor shows
// what changed between (pids.current as a second process joins, and after both left); the
// reused group keeps them, and deleting it closes every one (the test's descriptor count is
// back where it was).
func TestKeptControlFilesReadFreshAndClose(t *testing.T) {
	m := newManager(t)
	before := openFDs(t)
	l := Limits{MemoryMiB: 64, PIDs: 8}
	s1, s2 := startSleep(t), startSleep(t)
	g := placePooled(t, m, s1.Process.Pid, l)
	if u, err := g.Usage(); err != nil || u.PIDs != 1 {
		t.Fatalf("Usage with one process: %+v, %v", u, err)
	}
	if openFDs(t) <= before {
		t.Fatalf("a pooled group keeps no control file open (%d descriptors before and after)", before)
	}
	if err := g.Add(s2.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if u, err := g.Usage(); err != nil || u.PIDs != 2 {
		t.Fatalf("Usage read again through the kept descriptors: %+v, %v; want 2 pids", u, err)
	}
	for _, s := range []*exec.Cmd{s1, s2} {
		_ = s.Process.Kill()
		_ = s.Wait()
	}
	if u, err := g.Usage(); err != nil || u.PIDs != 0 {
		t.Fatalf("Usage once both exited: %+v, %v; want 0 pids", u, err)
	}
	if err := g.Release(); err != nil {
		t.Fatal(err)
	}
	s3 := startSleep(t)
	g2 := placePooled(t, m, s3.Process.Pid, l)
	if g2.Path() != g.Path() {
		t.Fatalf("group %s not reused (%s)", g.Path(), g2.Path())
	}
	if u, err := g2.Usage(); err != nil || u.PIDs != 1 {
		t.Fatalf("reused group's Usage: %+v, %v; want 1 pid", u, err)
	}
	_ = s3.Process.Kill()
	_ = s3.Wait()
	if err := g2.Release(); err != nil {
		t.Fatal(err)
	}
	if err := m.DropPooled("fn"); err != nil {
		t.Fatal(err)
	}
	assertGone(t, m, g.Path())
	if n := openFDs(t); n != before {
		t.Errorf("%d descriptors open after the group was deleted, %d before it was made", n, before)
	}
	// A group kept by Release and dropped by Cleanup (the daemon's shutdown) closes its
	// descriptors too.
	s4 := startSleep(t)
	g4 := placePooled(t, m, s4.Process.Pid, l)
	_ = s4.Process.Kill()
	_ = s4.Wait()
	if err := g4.Release(); err != nil {
		t.Fatal(err)
	}
	if err := m.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if n := openFDs(t); n != before {
		t.Errorf("%d descriptors open after Cleanup dropped a kept group, %d before", n, before)
	}
}

// startSleep starts a sleep(1) of a minute, killed at the end of the test.
func startSleep(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// openFDs counts the test process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
