package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestLimits: going over a limit kills that request only, the caller gets an
// error naming the limit and its value, and the function keeps serving.
func TestLimits(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(fixture("limits"))
	// The CPU case runs in a copy with cpu_ms: a limit shown here must not be
	// reachable by another first (fixtureAs).
	d.Up(fixtureAs(t, "limits", "limits-cpu", map[string]string{"cpu_ms": "300", "timeout_ms": "10000"}))
	// A request that exited cleanly leaves its group empty, and it is given
	// to a later child (internal/cgroup PlacePooled), which the pre-fork
	// pool moves into it ahead of its request (function.holdInCgroup): the
	// groups of clean requests come round again, so each limit below is
	// shown enforced in a reused group, held by a child that waited in it.
	seen := map[string]bool{}
	reused := false
	for i := 0; i < 8 && !reused; i++ {
		var cg string
		d.Invoke("limits", map[string]any{"action": "cgroup"}, &cg)
		g := cgroupLine(cg, "memory")
		if g == "" {
			t.Fatalf("request %d: no memory cgroup in %q", i, cg)
		}
		reused, seen[g] = seen[g], true
		time.Sleep(300 * time.Millisecond) // the group is given back once the child has exited
	}
	if !reused {
		t.Errorf("eight clean requests in a row ran in eight groups %v, want one reused", seen)
	}
	cases := []struct {
		fn, action, code, want string
		status                 int
	}{
		{"limits", "memory", "limit_exceeded", "memory limit exceeded: 64 MiB", 502},
		{"limits", "forkbomb", "limit_exceeded", "pids limit exceeded: 16", 502},
		{"limits", "sleep_loop", "timeout", "timeout_ms=4000", 504},
		{"limits-cpu", "spin", "limit_exceeded", "cpu limit exceeded: 300 ms", 502},
		{"limits", "big", "response_too_large", "max_response_kib=16", 502},
	}
	var ok string
	d.Invoke("limits-cpu", map[string]any{"action": "ok"}, &ok) // its spin runs in a group a clean request left
	time.Sleep(300 * time.Millisecond)
	for _, c := range cases {
		t0 := time.Now()
		_, err := d.TryInvoke(c.fn, map[string]any{"action": c.action})
		ae := apiError(t, err)
		if ae.Status != c.status || string(ae.Code) != c.code || !strings.Contains(ae.Message, c.want) {
			t.Errorf("%s: got %d %+v, want %d %s %q", c.action, ae.Status, ae.ErrorBody, c.status, c.code, c.want)
		}
		if el := time.Since(t0); el > 12*time.Second {
			t.Errorf("%s: took %s to be stopped", c.action, el)
		}
		d.Invoke(c.fn, map[string]any{"action": "ok"}, &ok)
		if ok != "ok" {
			t.Fatalf("after %s the function answered %q", c.action, ok)
		}
		time.Sleep(300 * time.Millisecond) // the ok request's group is kept for the next case
	}
	// An oversized request is refused before it reaches the function.
	_, err := d.TryInvoke("limits", map[string]any{"action": "ok", "pad": strings.Repeat("x", 17<<10)})
	if ae := apiError(t, err); ae.Status != 413 || !strings.Contains(ae.Message, "max_request_kib=16") {
		t.Errorf("oversized request: %d %+v", ae.Status, ae.ErrorBody)
	}
	d.Invoke("limits", map[string]any{"action": "ok"}, &ok)
}

// TestZygoteWorkIsNotChargedToTheRequest: what every child does for the
// zygote's sake before hello (here, the private copy of a 96 MiB shared
// mapping made at import) is charged to the zygote's cgroup, not to the
// request's memory_mib of 64, whether the child was pre-forked or forked for
// a waiting request and told to hurry (prefork = 0): the same request must not
// pass or be killed depending on whether the pool was empty.
func TestZygoteWorkIsNotChargedToTheRequest(t *testing.T) {
	d := startDaemon(t, "")
	for _, prefork := range []string{"0", "2"} {
		name := "shm" + prefork
		d.Up(writeFunction(t, map[string]string{
			"zygo.toml": "name = \"" + name + "\"\nruntime = \"python\"\nhandler = \"main:handler\"\nprefork = " + prefork +
				"\n[limits]\nmemory_mib = 64\n",
			"main.py": "import mmap\nSHM = mmap.mmap(-1, 96 << 20)\nSHM.write(b'x' * (96 << 20))\n" +
				"def handler(e, c):\n    return SHM[:1].decode()\n",
		}))
		for i := 0; i < 3; i++ {
			time.Sleep(300 * time.Millisecond) // a pool, when there is one, refills
			var got string
			res, err := d.TryInvoke(name, map[string]any{})
			if err != nil {
				t.Fatalf("prefork = %s, request %d: %v", prefork, i, err)
			}
			if json.Unmarshal(res.Value, &got); got != "x" {
				t.Errorf("prefork = %s, request %d (child %s): %s, want \"x\"", prefork, i, res.Child, res.Value)
			}
		}
	}
}
