package gvisor_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/zygo-run/zygo/internal/sandbox"
)

// Where the in-sandbox SDKs are put in the source sandbox.
const (
	sdkPython = "/opt/zygo-sdk/python"
	sdkNode   = "/opt/zygo-sdk/node/zygo-sandbox"
	goWatch   = "/opt/zygo-sdk/gowatch"
)

// pyWatch is a long-lived Python process that reseeds itself through zygo_sandbox in every new
// copy. On each line (the generation it expects, or "none") it waits for the watcher's
// callback (it does not call check(): the watcher must do it alone), waits a little longer so
// that a second call would show, and answers one JSON line.
const pyWatch = `
import json, random, ssl, sys, threading, time
import numpy as np
import zygo_sandbox

calls, lock = [], threading.Lock()

@zygo_sandbox.on_new_generation
def renew(gen, ident):
    zygo_sandbox.reseed()
    with lock:
        calls.append(gen)

random.random(); np.random.random(); ssl.RAND_bytes(16)   # the generators' state is memory at the checkpoint
print("ready", flush=True)
for line in sys.stdin:
    want = line.strip()
    deadline = time.monotonic() + 3
    while want != "none" and want not in calls and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    with lock:
        print(json.dumps({"calls": calls, "rows": {"random.random()": repr(random.random()),
            "numpy np.random.random()": repr(float(np.random.random())), "ssl.RAND_bytes(16)": ssl.RAND_bytes(16).hex()}}), flush=True)
`

// nodeWatch is pyWatch in Node: a generator the process owns (mulberry32), reseeded from the
// kernel through zygo-sandbox's randomBytes. Math.random and crypto are reported, not asserted:
// nothing in the process can reseed them (V8's state, OpenSSL's generator inside the process).
const nodeWatch = `
const zygo = require('` + sdkNode + `');
const crypto = require('crypto');
const readline = require('readline');
function mulberry32(a) {
  return () => { a |= 0; a = (a + 0x6D2B79F5) | 0; let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t; return ((t ^ (t >>> 14)) >>> 0) / 4294967296; };
}
let rng = mulberry32(crypto.randomBytes(4).readUInt32LE(0));
const calls = [];
zygo.onNewGeneration((gen) => { rng = mulberry32(zygo.randomBytes(4).readUInt32LE(0)); calls.push(gen); });
rng(); Math.random(); crypto.randomBytes(8); crypto.randomUUID();
console.log('ready');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
(async () => {
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const want = line.trim();
    const deadline = Date.now() + 3000;
    while (want !== 'none' && !calls.includes(want) && Date.now() < deadline) await sleep(10);
    await sleep(300);
    console.log(JSON.stringify({ calls, rows: { 'a generator the process owns (mulberry32)': String(rng()),
      'zygo-sandbox randomBytes(16)': zygo.randomBytes(16).toString('hex'), 'Math.random()': String(Math.random()),
      'crypto.randomUUID()': crypto.randomUUID(), 'crypto.randomBytes(16)': crypto.randomBytes(16).toString('hex') } }));
  }
})();
`

// buildGoWatch builds testdata/gowatch (static) and returns its path.
func buildGoWatch(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "gowatch")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/gowatch")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building testdata/gowatch: %v\n%s", err, b)
	}
	return out
}

// mustDiffer are the rows each helper must make differ in every copy; the other rows are
// reported only (what the helpers cannot reach: see docs/sandboxes.md, "For code inside a
// sandbox").
var mustDiffer = map[string][]string{
	"python": {"random.random()", "numpy np.random.random()", "ssl.RAND_bytes(16)"},
	"node":   {"a generator the process owns (mulberry32)", "zygo-sandbox randomBytes(16)"},
	"go":     {"a generator the process owns (math/rand/v2 ChaCha8)", "crypto/rand.Read(16 bytes)"},
}

// TestGenerationWatchers runs the in-sandbox helpers (sdk/python, sdk/node, sdk/go) in
// long-lived processes of a real sandbox, checkpoints it, forks 3 and rolls the source back
// once. In every copy each helper's callback ran exactly once, with that copy's generation, and
// the generators it reseeded draw values no other copy draws; in the source (no new generation)
// it never ran, and its draws are what every copy would have drawn without the helper.
func TestGenerationWatchers(t *testing.T) {
	h := newHarness(t, nil)
	ctx := tctx(t)
	src, procs := startWatchers(t, h)
	cp, err := h.m.Checkpoint(ctx, src.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	kids := h.forkN(t, src.ID, cp, 3)
	// rows[proc][row][copy]: the source first. It is not a new copy, so no callback runs there;
	// its draws are what every copy would draw without the helper (they share its memory).
	rows := watcherRows{}
	for _, p := range procs {
		r := h.report(t, src.ID, p.name, "none")
		if calls := decodeCalls(t, r); len(calls) != 0 {
			t.Errorf("%s in the source: callback ran for %v, want never", p.name, calls)
		}
		rows.add(t, p.name, "source", r)
	}
	rb, err := h.m.Rollback(ctx, src.ID, cp.ID)
	if err != nil {
		t.Fatal(err)
	}
	copies := map[string]sandbox.SandboxRecord{"rollback": rb}
	for i, k := range kids {
		copies[fmt.Sprintf("child %d", i)] = k
	}
	for label, c := range copies {
		for _, p := range procs {
			r := h.report(t, c.ID, p.name, c.Generation)
			if calls := decodeCalls(t, r); !slices.Equal(calls, []string{c.Generation}) {
				t.Errorf("%s in %s: callbacks for %v, want exactly one, for %s", p.name, label, calls, c.Generation)
			}
			rows.add(t, p.name, label, r)
		}
	}
	for _, p := range procs {
		rows.check(t, p.name)
	}
}

// startWatchers creates the source sandbox, puts the three helpers and their programs in it,
// starts the programs and waits until each is ready.
func startWatchers(t *testing.T, h *harness) (sandbox.SandboxRecord, []proc) {
	ctx := tctx(t)
	goBin := buildGoWatch(t)
	src, err := h.m.Create(ctx, sandbox.CreateOptions{Name: "watch"})
	if err != nil {
		t.Fatal(err)
	}
	h.putTree(t, src.ID, filepath.Join(repoRoot(), "sdk", "python"), sdkPython)
	h.putTree(t, src.ID, filepath.Join(repoRoot(), "sdk", "node", "zygo-sandbox"), sdkNode)
	b, err := os.ReadFile(goBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.m.PutFile(ctx, src.ID, goWatch, 0o755, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"pywatch.py": pyWatch, "nodewatch.js": nodeWatch} {
		if err := h.m.PutFile(ctx, src.ID, "/opt/"+name, 0o644, bytes.NewReader([]byte(text))); err != nil {
			t.Fatal(err)
		}
	}
	procs := []proc{
		{name: "python", argv: []string{"/usr/bin/python3", "/opt/pywatch.py"}, env: []string{"PYTHONPATH=" + sdkPython}},
		{name: "node", argv: []string{"/usr/bin/node", "/opt/nodewatch.js"}},
		{name: "go", argv: []string{goWatch}},
	}
	for _, p := range procs {
		h.start(t, src.ID, p)
	}
	for _, p := range procs {
		h.waitReady(t, src.ID, p.name)
	}
	return src, procs
}

// watcherRows holds what each copy reported: program -> row -> copy -> value.
type watcherRows map[string]map[string]map[string]string

func (w watcherRows) add(t *testing.T, prog, who string, r map[string]json.RawMessage) {
	t.Helper()
	var vals map[string]string
	if err := json.Unmarshal(r["rows"], &vals); err != nil {
		t.Fatalf("%s in %s: rows %s: %v", prog, who, r["rows"], err)
	}
	if w[prog] == nil {
		w[prog] = map[string]map[string]string{}
	}
	for k, v := range vals {
		if w[prog][k] == nil {
			w[prog][k] = map[string]string{}
		}
		w[prog][k][who] = v
	}
}

// check fails the test unless every row of mustDiffer[prog] differs in every copy, and logs
// how many distinct values every row had.
func (w watcherRows) check(t *testing.T, prog string) {
	for _, row := range slices.Sorted(maps.Keys(w[prog])) {
		vals := w[prog][row]
		if slices.Contains(mustDiffer[prog], row) {
			distinct(t, prog+" "+row+" (source, 3 children, 1 rollback)", vals)
		}
		n := len(slices.Compact(slices.Sorted(maps.Values(vals))))
		t.Logf("%-6s %-55s %d distinct of %d", prog, row, n, len(vals))
	}
	for _, row := range mustDiffer[prog] {
		if w[prog][row] == nil {
			t.Errorf("%s did not report %q", prog, row)
		}
	}
}

func decodeCalls(t *testing.T, r map[string]json.RawMessage) []string {
	t.Helper()
	var calls []string
	if err := json.Unmarshal(r["calls"], &calls); err != nil {
		t.Fatalf("decoding calls %s: %v", r["calls"], err)
	}
	return calls
}
