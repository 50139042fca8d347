package gvisor_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// cgroupFile returns the trimmed contents of FILE in controller ctrl's directory of instance
// id's cgroup (cgroup v1, as on the hosts this runs on), failing the test when it is missing.
func cgroupFile(t *testing.T, h *harness, ctrl, id, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", ctrl, h.be.CgroupPath(id), file))
	if err != nil {
		t.Fatalf("reading the cgroup of %s: %v (is the host cgroup v1 or hybrid?)", id, err)
	}
	return strings.TrimSpace(string(b))
}

// checkLimits checks instance id's host cgroup and what the sandbox sees inside against a
// sandbox of 1024 MiB, 128 tasks and 1.5 CPUs.
func checkLimits(t *testing.T, h *harness, sbID, engineID string) {
	t.Helper()
	if got := cgroupFile(t, h, "memory", engineID, "memory.limit_in_bytes"); got != strconv.Itoa(1024<<20) {
		t.Errorf("%s: memory.limit_in_bytes = %s, want %d", engineID, got, 1024<<20)
	}
	if got := cgroupFile(t, h, "cpu", engineID, "cpu.cfs_quota_us"); got != "150000" {
		t.Errorf("%s: cpu.cfs_quota_us = %s, want 150000", engineID, got)
	}
	if got := cgroupFile(t, h, "cpu", engineID, "cpu.cfs_period_us"); got != "100000" {
		t.Errorf("%s: cpu.cfs_period_us = %s, want 100000", engineID, got)
	}
	// The host's pids.max is a backstop above the limit inside (see limits.go).
	if got, _ := strconv.Atoi(cgroupFile(t, h, "pids", engineID, "pids.max")); got <= 128 {
		t.Errorf("%s: pids.max = %d, want a backstop above 128", engineID, got)
	}
	out := h.sh(t, sbID, "grep MemTotal /proc/meminfo; grep 'Max processes' /proc/self/limits")
	if !strings.Contains(out, "1048576 kB") || !regexpFields(out, "Max processes", "128", "128") {
		t.Errorf("%s sees:\n%s\nwant MemTotal 1048576 kB and Max processes 128 128", sbID, out)
	}
}

// regexpFields reports whether a line of out starts with prefix and has the given fields
// after it.
func regexpFields(out, prefix string, fields ...string) bool {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f := strings.Fields(rest)
			if len(f) >= len(fields) && strings.Join(f[:len(fields)], " ") == strings.Join(fields, " ") {
				return true
			}
		}
	}
	return false
}

// forkLoop forks sleeping children until fork fails, then prints "forked N errno E" and lets
// them go.
const forkLoop = `
import os, sys
r, w = os.pipe()
n, err = 0, 0
try:
    for i in range(1000):
        pid = os.fork()
        if pid == 0:
            os.close(w)
            os.read(r, 1)
            os._exit(0)
        n += 1
except OSError as e:
    err = e.errno
os.close(w)
print("forked", n, "errno", err, flush=True)
`

// alloc1G touches 1 GiB in 16 MiB pieces, printing how far it got.
const alloc1G = `
import sys
keep = []
for i in range(64):
    keep.append(b"\x01" * (16 << 20))
    print(i + 1, flush=True)
print("allocated 1 GiB", flush=True)
`

// memAvailableMiB returns the host's MemAvailable.
func memAvailableMiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
			kib, _ := strconv.Atoi(f[1])
			return kib >> 10
		}
	}
	t.Fatal("no MemAvailable in /proc/meminfo")
	return 0
}

// waitDead waits until the sandbox is Dead, and returns its record.
func waitDead(t *testing.T, h *harness, id string) sandbox.SandboxRecord {
	t.Helper()
	ctx := tctx(t)
	for {
		rec, err := h.m.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State == sandbox.Dead {
			return rec
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s is still %s", id, rec.State)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestManagerLimits: a sandbox created with 1 GiB, 128 tasks and 1.5 CPUs gets them in its
// host cgroup and sees them inside; a fork loop stops at the task limit with EAGAIN and the
// sandbox lives on; a fork child carries the same limits; in sandboxes of 256 MiB, 1 GiB of
// memory, in a process or in a file under /tmp, is stopped at the limit (the process killed,
// or the sandbox dead with the limit named); rm leaves no cgroup, also after a daemon
// restart. (The fork loop needs the larger sandbox: on gVisor each Python process costs about
// 4 MiB of host memory, page tables and the Sentry's bookkeeping, so 120 of them took
// 480 MiB.)
func TestManagerLimits(t *testing.T) {
	h := newHarness(t, nil)
	ctx := tctx(t)
	src, err := h.m.Create(ctx, sandbox.CreateOptions{Name: "lim", MemoryMiB: 1024, PIDs: 128, CPUs: 1.5})
	if err != nil {
		t.Fatal(err)
	}
	checkLimits(t, h, src.ID, src.EngineID)
	engines := []string{src.EngineID}

	// pids: fork fails with EAGAIN inside, below the limit (the agent's threads count too).
	out := h.sh(t, src.ID, "python3 -c '"+forkLoop+"'")
	var n, errno int
	if _, err := fmt.Sscanf(out, "forked %d errno %d", &n, &errno); err != nil || errno != 11 || n >= 128 || n < 64 {
		t.Errorf("fork loop under 128 tasks printed %q; want fewer than 128 forks ending with errno 11 (EAGAIN)", out)
	}
	t.Logf("fork loop: %s (host pids.peak %s)", strings.TrimSpace(out), cgroupFile(t, h, "pids", src.EngineID, "pids.peak"))
	if got := h.sh(t, src.ID, "echo alive"); got != "alive\n" {
		t.Errorf("after the fork loop: %q", got)
	}

	// A fork child has the same limits, in a cgroup of its own.
	res, err := h.m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 1})
	if err != nil || len(res.Children) != 1 || res.Children[0].Err != nil {
		t.Fatalf("Fork = %+v, %v", res, err)
	}
	kid := res.Children[0].Sandbox
	engines = append(engines, kid.EngineID)
	if kid.Options.Limits() != src.Options.Limits() {
		t.Errorf("child record limits %+v, want %+v", kid.Options.Limits(), src.Options.Limits())
	}
	checkLimits(t, h, kid.ID, kid.EngineID)

	// Memory in a process: a 256 MiB sandbox allocates 1 GiB.
	small, err := h.m.Create(ctx, sandbox.CreateOptions{Name: "small", MemoryMiB: 256})
	if err != nil {
		t.Fatal(err)
	}
	engines = append(engines, small.EngineID)
	before := memAvailableMiB(t)
	var aout bytes.Buffer
	st, err := h.m.Exec(ctx, small.ID, guest.ExecRequest{Argv: []string{"python3", "-c", alloc1G}}, &aout, nil)
	grew := before - memAvailableMiB(t)
	peak, _ := strconv.Atoi(cgroupFile(t, h, "memory", small.EngineID, "memory.max_usage_in_bytes"))
	t.Logf("1 GiB in a process: exit %+v, err %v, got to %d × 16 MiB; cgroup peak %d MiB; host MemAvailable fell by %d MiB",
		st, err, strings.Count(aout.String(), "\n"), peak>>20, grew)
	if strings.Contains(aout.String(), "allocated 1 GiB") {
		t.Errorf("a 256 MiB sandbox allocated 1 GiB")
	}
	if err == nil && st.Code != 137 {
		t.Errorf("the allocating process ended with %+v, want killed (137)", st)
	}
	if err != nil { // the OOM killer chose the Sentry: the sandbox is dead, saying why
		if rec := waitDead(t, h, small.ID); !strings.HasPrefix(rec.Error, "memory limit of 256 MiB reached") {
			t.Errorf("dead sandbox's cause %q does not name the memory limit", rec.Error)
		}
	}
	// The kernel may force a charge past the limit (cgroup v1 counts kernel memory: page
	// tables, a charge that must not fail), so the peak may pass 256 MiB by a little; what
	// matters is that it stays far from the 1 GiB asked for. A CI run saw 256.x MiB.
	if peak > (256+memChargeSlackMiB)<<20 || grew > 512 {
		t.Errorf("cgroup peak %d MiB, host memory fell by %d MiB: want at most 256 (+%d MiB of forced charges) and well below 1024", peak>>20, grew, memChargeSlackMiB)
	}

	// Memory in files: the root's overlay is memory, and counted. Another 256 MiB sandbox
	// writes 1 GiB to /tmp.
	files, err := h.m.Create(ctx, sandbox.CreateOptions{Name: "files", MemoryMiB: 256})
	if err != nil {
		t.Fatal(err)
	}
	engines = append(engines, files.EngineID)
	before = memAvailableMiB(t)
	var dout bytes.Buffer
	st, err = h.m.Exec(ctx, files.ID, guest.ExecRequest{Argv: []string{"/bin/sh", "-c",
		"dd if=/dev/zero of=/tmp/big bs=1M count=1024 2>&1; echo dd=$?; ls -l /tmp/big"}}, &dout, &dout)
	grew = before - memAvailableMiB(t)
	peak, _ = strconv.Atoi(cgroupFile(t, h, "memory", files.EngineID, "memory.max_usage_in_bytes"))
	t.Logf("1 GiB in /tmp: exit %+v, err %v, output %q; cgroup peak %d MiB; host MemAvailable fell by %d MiB",
		st, err, dout.String(), peak>>20, grew)
	if strings.Contains(dout.String(), "dd=0") {
		t.Errorf("a 256 MiB sandbox wrote 1 GiB to /tmp: %s", dout.String())
	}
	if err != nil {
		if rec := waitDead(t, h, files.ID); !strings.HasPrefix(rec.Error, "memory limit of 256 MiB reached") {
			t.Errorf("dead sandbox's cause %q does not name the memory limit", rec.Error)
		}
	}
	// The kernel may force a charge past the limit (cgroup v1 counts kernel memory: page
	// tables, a charge that must not fail), so the peak may pass 256 MiB by a little; what
	// matters is that it stays far from the 1 GiB asked for. A CI run saw 256.x MiB.
	if peak > (256+memChargeSlackMiB)<<20 || grew > 512 {
		t.Errorf("cgroup peak %d MiB, host memory fell by %d MiB: want at most 256 (+%d MiB of forced charges) and well below 1024", peak>>20, grew, memChargeSlackMiB)
	}

	// rm, dead or alive, leaves no cgroup.
	for _, id := range []string{kid.ID, src.ID, small.ID, files.ID} {
		if err := h.m.Remove(ctx, id); err != nil {
			t.Fatalf("Remove %s: %v", id, err)
		}
	}
	// After a daemon restart (the Manager and backend closed and opened again on the same
	// state), rm of a sandbox created before it removes its cgroup too.
	late, err := h.m.Create(ctx, sandbox.CreateOptions{Name: "late", MemoryMiB: 128})
	if err != nil {
		t.Fatal(err)
	}
	engines = append(engines, late.EngineID)
	if got := cgroupFile(t, h, "memory", late.EngineID, "memory.limit_in_bytes"); got != strconv.Itoa(128<<20) {
		t.Errorf("late: memory.limit_in_bytes = %s", got)
	}
	_ = h.m.Close()
	h.open(t, nil)
	if _, err := h.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.m.Remove(ctx, late.ID); err != nil {
		t.Fatal(err)
	}
	for _, e := range engines {
		if dirs := h.be.CgroupDirs(e); len(dirs) > 0 {
			t.Errorf("cgroup of %s left after rm: %v", e, dirs)
		}
	}
}

// A sandbox created without limits gets the defaults, recorded and in its cgroup.
func TestManagerDefaultLimits(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	rec, err := h.m.Create(tctx(t), sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Options.PIDs != sandbox.DefaultPIDs || rec.Options.MemoryMiB == 0 || rec.Options.CPUs != 0 {
		t.Errorf("default limits recorded as %+v", rec.Options.Limits())
	}
	if got := cgroupFile(t, h, "memory", rec.EngineID, "memory.limit_in_bytes"); got != strconv.Itoa(rec.Options.MemoryMiB<<20) {
		t.Errorf("memory.limit_in_bytes = %s, want %d MiB", got, rec.Options.MemoryMiB)
	}
	if got := cgroupFile(t, h, "cpu", rec.EngineID, "cpu.cfs_quota_us"); got != "-1" {
		t.Errorf("cpu.cfs_quota_us = %s, want -1 (no quota)", got)
	}
	if err := h.m.Remove(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if dirs := h.be.CgroupDirs(rec.EngineID); len(dirs) > 0 {
		t.Errorf("cgroup left after rm: %v", dirs)
	}
}

// memChargeSlackMiB is how far past its memory limit a cgroup's peak may go by the kernel's
// forced charges (see TestManagerLimits).
const memChargeSlackMiB = 8
