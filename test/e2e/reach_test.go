package e2e

import (
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// reachReport is what the reach fixtures return: every process of the
// sandbox the request can see, other than itself and its own threads.
type reachReport struct {
	Self   int `json:"self"`
	UID    int `json:"uid"`
	Others map[string]struct {
		Owner int    `json:"owner"` // uid owning /proc/PID/environ (a non-dumpable process's is not its own uid)
		Comm  string `json:"comm"`
		Open  string `json:"open"`  // open("/proc/PID/mem", O_RDWR)
		Write string `json:"write"` // pwrite of one byte back where it was read
	} `json:"others"`
}

// TestNoProcessInReach (issue 12, point 1): no process a request can see in
// its sandbox — PID 1, the zygote, idle pre-forked siblings, busy siblings —
// lets the request open its /proc/PID/mem for writing. The guard is the
// kernel's ptrace access check (each such process is non-dumpable, and
// there is no bwrap init: the agent is PID 1), not the seccomp filter: the
// open is an openat(2) the filter allows, and /proc/PID/environ of each is owned by
// a uid other than the request's, which only non-dumpable processes are.
// Fork mode with pre-forked children, spawn mode and a Node worker.
func TestNoProcessInReach(t *testing.T) {
	d := startDaemon(t, "")
	main, err := os.ReadFile(filepath.Join(fixture("reach"), "main.py"))
	if err != nil {
		t.Fatal(err)
	}
	spawn := writeFunction(t, map[string]string{"main.py": string(main), "zygo.toml": `
name = "reachspawn"
runtime = "python"
handler = "main:handler"
mode = "spawn"
`})
	d.Up(fixture("reach"))
	d.Up(spawn)
	d.Up(fixture("nodereach"))

	t.Run("fork", func(t *testing.T) {
		// Two busy siblings beside the idle pre-forked ones.
		busy := make(chan struct{})
		go func() {
			defer close(busy)
			d.InvokeMany("reach", 2, 2, func(int) any { return map[string]any{"action": "sleep", "seconds": 2} })
		}()
		time.Sleep(500 * time.Millisecond)
		var r reachReport
		d.Invoke("reach", map[string]any{}, &r)
		<-busy
		checkOutOfReach(t, r)
		if _, ok := r.Others["1"]; !ok || len(r.Others) < 3 {
			t.Errorf("fork mode: want the zygote (PID 1) and its other children in view, saw %v", pids(r))
		}
	})
	t.Run("spawn", func(t *testing.T) {
		var r reachReport
		d.Invoke("reachspawn", map[string]any{}, &r)
		checkOutOfReach(t, r)
		if r.Self != 1 || len(r.Others) != 0 {
			t.Errorf("spawn mode: want the request alone as PID 1, got pid %d beside %v", r.Self, pids(r))
		}
	})
	t.Run("node", func(t *testing.T) {
		var r reachReport
		d.Invoke("nodereach", map[string]any{}, &r)
		checkOutOfReach(t, r)
		if r.Self != 1 || len(r.Others) != 0 {
			t.Errorf("node worker: want the request alone as PID 1, got pid %d beside %v", r.Self, pids(r))
		}
	})
}

func checkOutOfReach(t *testing.T, r reachReport) {
	t.Helper()
	for pid, p := range r.Others {
		if p.Open == "ok" || p.Write == "ok" {
			t.Errorf("pid %s (%s): /proc/%s/mem opened for writing (%s), write %s", pid, p.Comm, pid, p.Open, p.Write)
		} else if p.Open != "EACCES" && p.Open != "EPERM" && p.Open != "ENOENT" {
			t.Errorf("pid %s (%s): open of /proc/%s/mem failed with %s, want EACCES or EPERM", pid, p.Comm, pid, p.Open)
		}
		if p.Owner == r.UID {
			t.Errorf("pid %s (%s): /proc/%s/environ is owned by the request's uid %d: the process is dumpable", pid, p.Comm, pid, p.Owner)
		}
	}
}

func pids(r reachReport) []string {
	var out []string
	for pid, p := range r.Others {
		out = append(out, pid+":"+p.Comm)
	}
	sort.Strings(out)
	return out
}
