package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func requireNode(t *testing.T) {
	t.Helper()
	if err := execCmd("/usr/bin/node", "--version"); err != nil {
		t.Fatal("/usr/bin/node not found: run `make deps` (apt-get install -y nodejs)")
	}
}

func TestNodeFunctions(t *testing.T) {
	requireNode(t)
	d := startDaemon(t, "")
	d.setSecret(t, "NODE_KEY", "node-s3cr3t")
	d.Up(fixture("nodefn"))
	d.Up(fixture("nodeesm"))
	// The CPU case runs in a copy with cpu_ms (see fixtureAs).
	d.Up(fixtureAs(t, "nodefn", "nodefn-cpu", map[string]string{"cpu_ms": "300", "timeout_ms": "10000"}))

	var esm struct{ Module, Sha string }
	d.Invoke("nodeesm", map[string]any{"text": "x"}, &esm)
	if esm.Module != "esm" || len(esm.Sha) != 8 {
		t.Errorf("ES module handler: %+v", esm)
	}

	// Import-time code sees neither the request's secrets nor its cgroup.
	var imp, now struct {
		Secrets []string
		Cgroup  string
		Key     string
	}
	d.Invoke("nodefn", map[string]any{"action": "import"}, &imp)
	d.Invoke("nodefn", map[string]any{"action": "now"}, &now)
	if len(imp.Secrets) != 0 {
		t.Errorf("import-time code saw secrets: %v", imp.Secrets)
	}
	if now.Key != "node-s3cr3t" || len(now.Secrets) != 1 {
		t.Errorf("the request did not get its secret: %+v", now)
	}
	// Import-time code runs in the worker's own group (<fn>/z-…), the
	// request in a group of its own (<fn>/p<N>, a request group kept empty
	// and reused: internal/cgroup PlacePooled).
	if !strings.Contains(imp.Cgroup, "/nodefn/z-") || strings.Contains(imp.Cgroup, "/nodefn/p") {
		t.Errorf("import-time code did not run in the worker's own cgroup:\n%s", imp.Cgroup)
	}
	if !strings.Contains(now.Cgroup, "/nodefn/p") {
		t.Errorf("the request did not run in its cgroup:\n%s", now.Cgroup)
	}
	if left := secretFilesLeft(t, d.StateDir); len(left) != 0 {
		t.Errorf("secret files left after the request: %v", left)
	}

	// Private TMPDIR and per-request output.
	var a, b string
	d.Invoke("nodefn", map[string]any{"action": "tmp"}, &a)
	d.Invoke("nodefn", map[string]any{"action": "tmp"}, &b)
	if a == b || !strings.HasPrefix(a, "/run/zygo/req/") {
		t.Errorf("TMPDIR not private: %q %q", a, b)
	}
	res := d.Invoke("nodefn", map[string]any{"action": "say"}, nil)
	lines := d.Logs("nodefn", res.RequestID)
	if countLines(lines, "stdout hello from "+res.RequestID) != 1 || countLines(lines, "stderr warn from "+res.RequestID) != 1 {
		t.Errorf("request output not captured once each: %v", lines)
	}

	// Clear errors, and the function keeps serving after each.
	cases := []struct{ fn, action, code, want string }{
		{"nodefn", "throw", "handler_error", "out of range: x"},
		{"nodefn", "crash", "crashed", "SIGSEGV"},
		{"nodefn", "sleep", "timeout", "timeout_ms=4000"},
		{"nodefn-cpu", "spin", "limit_exceeded", "cpu limit exceeded: 300 ms"},
		{"nodefn", "memory", "limit_exceeded", "memory limit exceeded: 64 MiB"},
		{"nodefn", "forkbomb", "limit_exceeded", "pids limit exceeded: 16"},
	}
	for _, c := range cases {
		t0 := time.Now()
		_, err := d.TryInvoke(c.fn, map[string]any{"action": c.action, "why": "x"})
		ae := apiError(t, err)
		if string(ae.Code) != c.code || !strings.Contains(ae.Message, c.want) {
			t.Errorf("%s: got %d %+v, want %s %q", c.action, ae.Status, ae.ErrorBody, c.code, c.want)
		}
		if c.action == "throw" && (ae.Type != "RangeError" || !strings.Contains(ae.Traceback, "index.js")) {
			t.Errorf("throw: type %q, stack %q", ae.Type, ae.Traceback)
		}
		if time.Since(t0) > 12*time.Second {
			t.Errorf("%s took %s", c.action, time.Since(t0))
		}
		var ok string
		d.Invoke(c.fn, map[string]any{}, &ok)
	}
	if logs := strings.Join(d.Logs("nodefn", ""), "\n"); strings.Contains(logs, "node-s3cr3t") {
		t.Error("a secret value reached the logs")
	}

	// The pool is configurable and refilled; a new version drains the old workers.
	st, err := d.Client.Functions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range st {
		if f.Name == "nodefn" && f.IdleWorkers > 2 {
			t.Errorf("pool_size = 2 but %d idle workers", f.IdleWorkers)
		}
	}
}

// TestCaseBH07_NodeWorkers: Math.random, crypto.randomBytes and a new vm
// context's Math.random differ across 11 requests (each a fresh worker).
func TestCaseBH07_NodeWorkers(t *testing.T) {
	requireNode(t)
	d := startDaemon(t, "")
	d.Up(fixture("bh07"))
	var m, c, v []string
	for _, raw := range forkN(t, d, "bh07", 11, 4) {
		var r map[string]any
		json.Unmarshal(raw, &r)
		m, c, v = append(m, toString(r["m"])), append(c, toString(r["c"])), append(v, toString(r["v"]))
	}
	for name, vals := range map[string][]string{"Math.random()": m, "crypto.randomBytes(8)": c, "vm new context": v} {
		if n := distinct(vals); n != 11 {
			t.Errorf("%s: %d distinct of 11", name, n)
		}
	}
}
