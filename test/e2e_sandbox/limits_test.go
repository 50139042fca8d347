package e2esandbox

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/sandbox/gvisor"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// cgroupOf returns FILE of controller ctrl in engine instance engine's cgroup, or "" when it
// does not exist.
func cgroupOf(ctrl, engine, file string) string {
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", ctrl, gvisor.DefaultCgroupParent, engine, file))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// cgroupLeft returns the directories of engine's cgroup still on the host.
func cgroupLeft(engine string) []string {
	left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", gvisor.DefaultCgroupParent, engine))
	return left
}

// TestSandboxLimits: --memory/--pids/--cpus through the CLI and the API: bad values are
// refused naming the field (400), good ones are in the record, the cgroup and the sandbox's
// view, and in a fork child's; after the daemon is killed and started again, rm removes every
// cgroup.
func TestSandboxLimits(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()

	for _, tc := range []struct{ args []string }{
		{[]string{"--memory", "10"}},
		{[]string{"--memory", "2x"}},
		{[]string{"--pids", "5"}},
		{[]string{"--cpus", "1000"}},
		{[]string{"--cpus", "-1"}},
	} {
		msg := d.Fails(append([]string{"sandbox", "create"}, tc.args...)...)
		if field := strings.TrimPrefix(tc.args[0], "--"); !strings.Contains(msg, field) {
			t.Errorf("create %v: %q, want the field named", tc.args, msg)
		}
	}
	_, err := d.Client.CreateSandbox(ctx, wire.CreateSandboxBody{MemoryMiB: 10})
	wantStatus(t, err, http.StatusBadRequest, "memory_mib 10: must be from 64 MiB")
	_, err = d.Client.CreateSandbox(ctx, wire.CreateSandboxBody{PIDs: 1})
	wantStatus(t, err, http.StatusBadRequest, "pids 1: must be from 32")
	if recs := d.Sandboxes(); len(recs) != 0 {
		t.Fatalf("refused creates left %d sandboxes", len(recs))
	}

	id := d.OK("sandbox", "create", "--name", "lim", "--memory", "512m", "--pids", "128", "--cpus", "0.5")
	rec := d.Record(id)
	if o := rec.Options; o.MemoryMiB != 512 || o.PIDs != 128 || o.CPUs != 0.5 {
		t.Errorf("record options %+v, want 512 MiB, 128 pids, 0.5 cpus", o)
	}
	engines := []string{rec.EngineID}
	check := func(name, engine string) {
		t.Helper()
		if got := cgroupOf("memory", engine, "memory.limit_in_bytes"); got != strconv.Itoa(512<<20) {
			t.Errorf("%s: memory.limit_in_bytes = %q", name, got)
		}
		if got := cgroupOf("cpu", engine, "cpu.cfs_quota_us"); got != "50000" {
			t.Errorf("%s: cpu.cfs_quota_us = %q", name, got)
		}
		if out := d.OK("sandbox", "exec", name, "--", "grep", "Max processes", "/proc/self/limits"); len(strings.Fields(out)) < 4 ||
			strings.Fields(out)[2] != "128" {
			t.Errorf("%s: %q, want Max processes 128", name, out)
		}
	}
	check("lim", rec.EngineID)

	d.OK("sandbox", "fork", "lim", "-n", "1")
	for _, r := range d.Sandboxes() {
		if r.ParentID == id {
			engines = append(engines, r.EngineID)
			if r.Options.Limits() != rec.Options.Limits() {
				t.Errorf("child options %+v, want %+v", r.Options.Limits(), rec.Options.Limits())
			}
			check(r.Name, r.EngineID)
		}
	}
	if len(engines) != 2 {
		t.Fatalf("no fork child found in %+v", d.Sandboxes())
	}

	// The daemon is killed (no clean shutdown), started again, and everything removed.
	if err := d.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.Cmd.Wait()
	d.Start()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(d.Log(), "sandboxes recovered"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not report recovery:\n%s", tail(d.Log(), 20))
		}
	}
	d.removeAll()
	for _, e := range engines {
		if left := cgroupLeft(e); len(left) > 0 {
			t.Errorf("cgroup of %s left after rm: %v", e, left)
		}
	}
}
