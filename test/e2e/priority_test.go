package e2e

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// niceOf returns the nice value of host process pid (/proc/PID/stat, field 19).
func niceOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // from field 3, state
	n, err := strconv.Atoi(fields[19-3])
	if err != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return n
}

// childrenOf returns the host pids whose parent is pid.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}

// A fork zygote that keeps a pool, and its idle pre-forked children, run at a nice value 4
// above the zygote's own (a lower priority; internal/agentproc/priority.go): the pool's
// refills are work done ahead, and a request's child, given the zygote's own priority back
// before GO, runs ahead of them. A zygote without a pool forks on the request path and keeps
// its priority; one whose import lowered its own keeps that for its requests.
func TestPoolRefillsRunBelowRequests(t *testing.T) {
	base, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0) // raw: 20 - nice
	if err != nil {
		t.Fatal(err)
	}
	base = 20 - base // the daemon inherits the test's nice value
	want := min(base+4, 19)
	d := startDaemon(t, "")
	handler := "import os\n\ndef handler(event, context):\n    return {\"nice\": os.getpriority(os.PRIO_PROCESS, 0)}\n"
	d.Up(writeFunction(t, map[string]string{
		"zygo.toml": "name = \"nice\"\nruntime = \"python\"\nhandler = \"main:handler\"\n",
		"main.py":   handler,
	}))
	d.Up(writeFunction(t, map[string]string{
		"zygo.toml": "name = \"nice-nopool\"\nruntime = \"python\"\nhandler = \"main:handler\"\nprefork = 0\n",
		"main.py":   handler,
	}))
	// An import that lowers its own priority keeps it: the daemon only undoes what it did.
	d.Up(writeFunction(t, map[string]string{
		"zygo.toml": "name = \"nice-import\"\nruntime = \"python\"\nhandler = \"main:handler\"\n",
		"main.py":   "import os\nos.nice(10)\n\n" + handler,
	}))
	d.Invoke("nice", map[string]any{}, nil) // traffic: the pool fills
	zygotes := map[string]int{}
	out, _, code := d.CLI("ls", "-o", "json")
	var fns []struct {
		Name      string `json:"name"`
		ZygotePID int    `json:"zygote_pid"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &fns) != nil || len(fns) != 3 {
		t.Fatalf("zygo ls -o json: exit %d, %q", code, out)
	}
	for _, f := range fns {
		zygotes[f.Name] = f.ZygotePID
	}
	if got := niceOf(t, zygotes["nice"]); got != want {
		t.Errorf("the pooled zygote (pid %d) runs at nice %d, want %d (the daemon's %d + 4)", zygotes["nice"], got, want, base)
	}
	if got := niceOf(t, zygotes["nice-nopool"]); got != base {
		t.Errorf("the zygote without a pool (pid %d) runs at nice %d, want the daemon's %d", zygotes["nice-nopool"], got, base)
	}
	var idle []int
	for deadline := time.Now().Add(10 * time.Second); len(idle) == 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		idle = childrenOf(t, zygotes["nice"])
	}
	if len(idle) == 0 {
		t.Fatal("no pre-forked child appeared within 10 s")
	}
	for _, pid := range idle {
		if got := niceOf(t, pid); got != want {
			t.Errorf("idle pre-forked child %d runs at nice %d, want %d", pid, got, want)
		}
	}
	imported := min(base+10, 19)
	wantZygote := imported + 4
	if wantZygote > 19 { // no room below it: left as the import made it
		wantZygote = imported
	}
	if got := niceOf(t, zygotes["nice-import"]); got != wantZygote {
		t.Errorf("the zygote whose import set nice %d (pid %d) runs at nice %d, want %d", imported, zygotes["nice-import"], got, wantZygote)
	}
	for fn, wantReq := range map[string]int{"nice": base, "nice-nopool": base, "nice-import": imported} {
		var v struct{ Nice int }
		res := d.Invoke(fn, map[string]any{}, &v)
		if v.Nice != wantReq {
			t.Errorf("%s: the request's child (%s) ran at nice %d, want %d", fn, res.Child, v.Nice, wantReq)
		}
	}
}
