package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// reachReport is what the reach fixtures return: every process of the
// sandbox the request can see, other than itself and its own threads, and
// (Python) every abstract unix socket a hold request listens on.
type reachReport struct {
	Self   int `json:"self"`
	UID    int `json:"uid"`
	Others map[string]struct {
		Owner  int    `json:"owner"` // uid owning /proc/PID/environ (a non-dumpable process's is not its own uid)
		Comm   string `json:"comm"`
		Open   string `json:"open"`   // open("/proc/PID/mem", O_RDWR)
		Write  string `json:"write"`  // pwrite of one byte back where it was read
		Signal string `json:"signal"` // kill(PID, SIGINT) for PID 1, kill(PID, SIGTERM) for others (Python only)
		// ProcWrites: oom_score_adj, clear_refs, sched of PID -> open-and-write outcome (Python only)
		ProcWrites map[string]string `json:"proc_writes"`
	} `json:"others"`
	Sockets map[string]string `json:"sockets"` // abstract name -> connect(2) outcome
}

// holdReport is what a hold request returns: its own subprocess and
// socket stayed within its reach.
type holdReport struct {
	Sub        int    `json:"sub"`
	OwnKill    string `json:"own_kill"`
	OwnConnect string `json:"own_connect"`
	SubStatus  int    `json:"sub_status"`
}

// TestNoProcessInReach (issue 12, point 1): no process a request can see in
// its sandbox — PID 1, the zygote, idle pre-forked siblings, busy siblings,
// and what a sibling execs — lets the request open its /proc/PID/mem for
// writing. The guard is the kernel's ptrace access check, not the seccomp
// filter (the open is an openat(2) the filter allows): the agent's own
// processes are non-dumpable (and there is no bwrap init: the agent is
// PID 1), and in fork mode each request runs in a Landlock domain of its
// own, which also covers a sibling's exec'd subprocess (dumpable again after
// execve, so its /proc/PID/environ is the request's uid) and refuses the
// request's signals to the zygote (SIGINT, which it handles) and to its
// siblings, and its connections to a sibling's abstract unix socket, while
// each hold request still signals its own subprocess and connects to its
// own socket. Fork mode with pre-forked children, spawn mode and a Node
// worker.
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
		// Two busy siblings, each holding a subprocess and a socket, beside
		// the idle pre-forked ones; the probe waits until it sees both.
		holds := holdConcurrently(t, d, 2)
		var r reachReport
		d.Invoke("reach", map[string]any{"holders": 2}, &r)
		execd := map[string]bool{}
		for _, h := range holds() {
			execd[strconv.Itoa(h.Sub)] = true
			if h.OwnKill != "ok" || h.OwnConnect != "ok" || h.SubStatus != -15 {
				t.Errorf("a request lost reach of its own processes: kill of its subprocess %s (status %d), connect to its own socket %s",
					h.OwnKill, h.SubStatus, h.OwnConnect)
			}
		}
		checkOutOfReach(t, r, execd)
		checkNoSignal(t, r)
		checkNoProcWrites(t, r, execd)
		if _, ok := r.Others["1"]; !ok || len(r.Others) < 5 {
			t.Errorf("fork mode: want the zygote (PID 1), its other children and two subprocesses in view, saw %v", pids(r))
		}
		for pid := range execd {
			if p, ok := r.Others[pid]; !ok || p.Owner != r.UID {
				t.Errorf("fork mode: want a sibling's exec'd subprocess %s in view and dumpable, saw %+v among %v", pid, p, pids(r))
			}
		}
		if len(r.Sockets) < 2 {
			t.Errorf("fork mode: want the two siblings' abstract sockets in view, saw %v", r.Sockets)
		}
		for name, outcome := range r.Sockets {
			if outcome != "EPERM" {
				t.Errorf("connect to a sibling's abstract unix socket @%s: %s, want EPERM", name, outcome)
			}
		}
		// The zygote kept serving: the same one, which reported its Landlock.
		d.Invoke("reach", map[string]any{"action": "sleep", "seconds": 0}, nil)
		logs := strings.Join(d.Logs("reach", ""), "\n")
		if n := strings.Count(logs, "zygote ready in"); n != 1 || strings.Contains(logs, "zygote died") {
			t.Errorf("the zygote did not keep serving (%d ready lines):\n%s", n, logs)
		}
		if !strings.Contains(logs, "warm-up landlock [info]") {
			t.Errorf("warm-up report does not say each request gets a Landlock domain:\n%s", logs)
		}
	})
	t.Run("spawn", func(t *testing.T) {
		var r reachReport
		d.Invoke("reachspawn", map[string]any{}, &r)
		checkOutOfReach(t, r, nil)
		if r.Self != 1 || len(r.Others) != 0 {
			t.Errorf("spawn mode: want the request alone as PID 1, got pid %d beside %v", r.Self, pids(r))
		}
	})
	t.Run("node", func(t *testing.T) {
		var r reachReport
		d.Invoke("nodereach", map[string]any{}, &r)
		checkOutOfReach(t, r, nil)
		if r.Self != 1 || len(r.Others) != 0 {
			t.Errorf("node worker: want the request alone as PID 1, got pid %d beside %v", r.Self, pids(r))
		}
	})
	// Last: on a sandbox that lets it through, this attack breaks the zygote.
	t.Run("retarget", func(t *testing.T) { checkRetarget(t, d) })
}

// holdConcurrently starts n hold requests of the reach function and
// returns a function that waits for the reports of those that succeeded
// (a failed one is reported, so the other checks still run).
func holdConcurrently(t *testing.T, d *Daemon, n int) func() []holdReport {
	t.Helper()
	out := make([]holdReport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := d.TryInvoke("reach", map[string]any{"action": "hold", "seconds": 6})
			if err == nil {
				err = json.Unmarshal(res.Value, &out[i])
			}
			errs[i] = err
		}()
	}
	return func() []holdReport {
		wg.Wait()
		var ok []holdReport
		for i, err := range errs {
			if err != nil {
				t.Errorf("a hold request failed: %v", err)
			} else {
				ok = append(ok, out[i])
			}
		}
		return ok
	}
}

// checkOutOfReach: no /proc/PID/mem opened for writing, and every process
// non-dumpable but those in execd (what a sibling exec'd: execve makes a
// process dumpable again, and its guard is the sibling's Landlock domain).
func checkOutOfReach(t *testing.T, r reachReport, execd map[string]bool) {
	t.Helper()
	for pid, p := range r.Others {
		if p.Open == "ok" || p.Write == "ok" {
			t.Errorf("pid %s (%s): /proc/%s/mem opened for writing (%s), write %s", pid, p.Comm, pid, p.Open, p.Write)
		} else if p.Open != "EACCES" && p.Open != "EPERM" && p.Open != "ENOENT" {
			t.Errorf("pid %s (%s): open of /proc/%s/mem failed with %s, want EACCES or EPERM", pid, p.Comm, pid, p.Open)
		}
		if p.Owner == r.UID && !execd[pid] {
			t.Errorf("pid %s (%s): /proc/%s/environ is owned by the request's uid %d: the process is dumpable", pid, p.Comm, pid, p.Owner)
		}
	}
}

// checkNoSignal: every kill(2) the request sent to a process outside its
// own failed with EPERM (ESRCH: the process had already exited).
func checkNoSignal(t *testing.T, r reachReport) {
	t.Helper()
	for pid, p := range r.Others {
		if p.Signal != "EPERM" && p.Signal != "ESRCH" {
			t.Errorf("pid %s (%s): kill from another request: %s, want EPERM", pid, p.Comm, p.Signal)
		}
	}
	if p, ok := r.Others["1"]; ok && p.Signal != "EPERM" {
		t.Errorf("the zygote (PID 1): SIGINT from a request: %s, want EPERM", p.Signal)
	}
}

// checkNoProcWrites: no /proc file of another process (oom_score_adj,
// clear_refs, sched) could be opened for writing, least of all those of a
// sibling's exec'd subprocess, which its uid owns (the request's Landlock
// domain refuses writes outside the writable mounts: EACCES).
func checkNoProcWrites(t *testing.T, r reachReport, execd map[string]bool) {
	t.Helper()
	for pid := range execd {
		if p, ok := r.Others[pid]; ok && len(p.ProcWrites) != 3 {
			t.Errorf("pid %s: /proc writes not tried: %v", pid, p.ProcWrites)
		}
	}
	for pid, p := range r.Others {
		for file, outcome := range p.ProcWrites {
			if outcome != "EACCES" && outcome != "ENOENT" {
				t.Errorf("pid %s (%s): open of /proc/%s/%s for writing: %s, want EACCES", pid, p.Comm, pid, file, outcome)
			}
		}
	}
}

// TestNoNewNamespaces (issue 12, point 1): a request cannot make a
// namespace: clone(2) with CLONE_NEWUSER (alone or with CLONE_NEWNET) and
// unshare(CLONE_NEWUSER) fail with EPERM, clone3 with ENOSYS (the default
// seccomp filter), while threads still start (glibc falls back to clone).
func TestNoNewNamespaces(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(fixture("reach"))
	var r map[string]any
	d.Invoke("reach", map[string]any{"action": "namespaces"}, &r)
	want := map[string]any{"clone_newuser": "EPERM", "clone_newuser_newnet": "EPERM",
		"unshare_newuser": "EPERM", "clone3_newuser": "ENOSYS", "thread": true}
	for k, v := range want {
		if r[k] != v {
			t.Errorf("%s: %v, want %v (all: %v)", k, r[k], v, r)
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
