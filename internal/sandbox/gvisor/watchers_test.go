package gvisor_test

import (
	"bytes"
	"encoding/json"
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
import json, random, sys, threading, time
import numpy as np
import zygo_sandbox

calls, lock = [], threading.Lock()

@zygo_sandbox.on_new_generation
def renew(gen, ident):
    zygo_sandbox.reseed()
    with lock:
        calls.append(gen)

random.random(); np.random.random()   # the generators' state is memory at the checkpoint
print("ready", flush=True)
for line in sys.stdin:
    want = line.strip()
    deadline = time.monotonic() + 3
    while want != "none" and want not in calls and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    with lock:
        print(json.dumps({"calls": calls, "draw": "%r %r" % (random.random(), float(np.random.random()))}), flush=True)
`

// nodeWatch is pyWatch in Node: a generator the process owns (mulberry32), reseeded from the
// kernel through zygo-sandbox's randomBytes. Math.random and crypto are reported, not asserted:
// nothing in the process can reseed them.
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
rng(); Math.random(); crypto.randomBytes(8);
console.log('ready');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
(async () => {
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const want = line.trim();
    const deadline = Date.now() + 3000;
    while (want !== 'none' && !calls.includes(want) && Date.now() < deadline) await sleep(10);
    await sleep(300);
    console.log(JSON.stringify({ calls, draw: String(rng()), math_random: Math.random(),
      crypto_random_bytes: crypto.randomBytes(8).toString('hex') }));
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

// TestGenerationWatchers runs the in-sandbox helpers (sdk/python, sdk/node, sdk/go) in
// long-lived processes of a real sandbox, checkpoints it, forks 3 and rolls the source back
// once. In every copy each helper's callback ran exactly once, with that copy's generation, and
// the generator it reseeded draws a value no sibling draws; in the source (no new generation)
// it never ran.
func TestGenerationWatchers(t *testing.T) {
	h := newHarness(t, nil)
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
	cp, err := h.m.Checkpoint(ctx, src.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	kids := h.forkN(t, src.ID, cp, 3)

	type copyOf struct{ id, gen, label string }
	var copies []copyOf
	for i, k := range kids {
		copies = append(copies, copyOf{k.ID, k.Generation, "child " + string(rune('0'+i))})
	}
	// The source first: it is not a new copy, so no callback; its draw is what every copy would
	// draw without the helper (they share its memory at the checkpoint).
	draws := map[string]map[string]string{}
	for _, p := range procs {
		r := h.report(t, src.ID, p.name, "none")
		if calls := decodeCalls(t, r); len(calls) != 0 {
			t.Errorf("%s in the source: callback ran for %v, want never", p.name, calls)
		}
		draws[p.name] = map[string]string{"source": str(r["draw"])}
	}
	rb, err := h.m.Rollback(ctx, src.ID, cp.ID)
	if err != nil {
		t.Fatal(err)
	}
	copies = append(copies, copyOf{rb.ID, rb.Generation, "rollback"})
	for _, c := range copies {
		for _, p := range procs {
			r := h.report(t, c.id, p.name, c.gen)
			if calls := decodeCalls(t, r); !slices.Equal(calls, []string{c.gen}) {
				t.Errorf("%s in %s: callbacks for %v, want exactly one, for %s", p.name, c.label, calls, c.gen)
			}
			draws[p.name][c.label] = str(r["draw"])
			if p.name == "node" {
				t.Logf("node in %s: Math.random() %s, crypto.randomBytes %s (not reseedable; reported only)",
					c.label, r["math_random"], r["crypto_random_bytes"])
			}
		}
	}
	for _, p := range procs {
		distinct(t, p.name+" draws after reseed (source, 3 children, 1 rollback)", draws[p.name])
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
