package gvisor_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// The programs of the sandbox cases of shared/cases/fork-safety-cases.md, each a long-lived
// process of the CLONE-N harness (clone_test.go). Each answers every line on stdin with one
// JSON line.
var casePrograms = map[string]string{
	// BH-02, a process that does not use the helper: its generator is memory, the same in
	// every copy; Zygo cannot reach into it (documented).
	"bh02": `
import json, random, sys, tempfile
random.random(); next(tempfile._get_candidate_names())
print("ready", flush=True)
for line in sys.stdin:
    print(json.dumps({"v": str(random.getrandbits(64)), "tmpname": next(tempfile._get_candidate_names())}), flush=True)
`,
	// BH-02 with the documented on-restore hook: zygo_sandbox reseeds random, NumPy, OpenSSL
	// and tempfile's names once per copy; check() makes sure it ran before the draw.
	"bh02w": `
import json, random, sys, tempfile
import zygo_sandbox
zygo_sandbox.auto_reseed()
random.random(); next(tempfile._get_candidate_names())
print("ready", flush=True)
for line in sys.stdin:
    zygo_sandbox.check()
    print(json.dumps({"v": str(random.getrandbits(64)), "tmpname": next(tempfile._get_candidate_names()),
                      "generation": zygo_sandbox.current()}), flush=True)
`,
	// BH-03: kernel randomness on the very first read after the restore. The process spins
	// (5 ms) and notices that it was frozen (a monotonic gap over 2 s: the copy waited 4 s as
	// an image); its first draw then happens before, or at the latest about when, reseal runs.
	"bh03": `
import json, os, select, sys, time, uuid
def sample():
    with open("/proc/sys/kernel/random/uuid") as f:
        u = f.read().strip()
    return {"urandom": os.urandom(32).hex(), "uuid_file": u, "uuid4": str(uuid.uuid4())}
def gen():
    try:
        with open("/run/zygo/generation") as f:
            return f.read().strip()
    except OSError:
        return ""
g0 = gen()
print("ready", flush=True)
first, last = None, time.monotonic()
while True:
    r, _, _ = select.select([sys.stdin], [], [], 0.005)
    now = time.monotonic()
    if now - last > 2:   # the latest freeze wins: a stall before the checkpoint is overwritten
        first = sample()
        first["resealed_already"] = gen() != g0
    last = now
    if r:
        sys.stdin.readline()
        print(json.dumps({"first": first, "poke": sample()}), flush=True)
`,
	// BH-17: a line left in stdout's buffer (a file: block-buffered) at the checkpoint; ready
	// goes to stderr so that the marker stays unflushed.
	"bh17": `
import sys
sys.stdout.write("warmup-marker\n")
sys.stderr.write("ready\n"); sys.stderr.flush()
print("child", sys.stdin.readline().strip())
`,
	// BH-22: the wall clock against the host's, sent right after the restore.
	"bh22": `
import json, sys, time
print("ready", flush=True)
for line in sys.stdin:
    print(json.dumps({"skew": time.time() - float(line)}), flush=True)
`,
	// BH-23: the monotonic clock across the restore, on every CPU, and a 2 s timeout armed
	// before the checkpoint.
	"bh23": `
import json, os, sys, time
t0, w0 = time.monotonic(), time.time()
deadline = t0 + 2
print("ready", flush=True)
for line in sys.stdin:
    t1, w1 = time.monotonic(), time.time()
    cpus = sorted(os.sched_getaffinity(0))
    seq = []
    for cpu in cpus * 200:
        os.sched_setaffinity(0, {cpu}); seq.append(time.monotonic())
    os.sched_setaffinity(0, set(cpus))
    with open("/run/zygo/identity.json") as f:
        suspended = json.load(f).get("suspended_ns", 0) / 1e9
    print(json.dumps({"jump": t1 - t0, "wall": w1 - w0, "expired": t1 > deadline,
                      "backwards": any(b < a for a, b in zip(seq, seq[1:])), "cpus": len(cpus),
                      "suspended_s": suspended}), flush=True)
`,
	// BH-24: a token fetched before the checkpoint from the product's secret channel
	// (/run/secrets, re-written by every reseal) against the one delivered to the copy.
	"bh24": `
import json, os, sys
def token():
    with open("/run/secrets/token") as f:
        return f.read().strip()
tok = token()
print("ready", flush=True)
for line in sys.stdin:
    fresh = token()
    print(json.dumps({"same": tok == fresh, "fresh": fresh, "old_file": os.path.exists("/run/secrets/old")}), flush=True)
`,
}

// issuer is BH-24's mock token issuer behind the reseal's secret channel: it mints one token
// per generation and accepts a token only with the generation it was minted for.
type issuer struct {
	mu    sync.Mutex        // guards byGen
	byGen map[string]string // generation -> token
}

func (is *issuer) mint(gen string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	is.mu.Lock()
	defer is.mu.Unlock()
	is.byGen[gen] = "tok-" + hex.EncodeToString(b)
	return is.byGen[gen]
}

func (is *issuer) accepts(tok, gen string) bool {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.byGen[gen] == tok
}

// reseal is the Manager's ResealFunc: every copy gets a fresh token for its new generation.
func (is *issuer) reseal(ctx context.Context, t sandbox.ResealTarget) (guest.ResealResult, error) {
	return sandbox.ResealWith(ctx, t, map[string][]byte{"token": []byte(is.mint(t.Sandbox.Generation))})
}

// copyResult is what one copy reported, per program.
type copyResult struct {
	label, id, gen string
	rep            map[string]map[string]json.RawMessage
	bh17           string
	interp         map[string]string
	shell          map[string]string
	tmpListing     string
}

// TestCloneCases runs the sandbox cases BH-02, BH-03, BH-17, BH-19, BH-20, BH-22, BH-23 and
// BH-24 as CLONE-N tests with N = 4 (not the cases' 8, to keep the test fast): one source
// sandbox runs every case's program; it is checkpointed; one child is forked after 1 s, four
// after 4 s, and the source is rolled back once at the end (about 10 s after the checkpoint).
func TestCloneCases(t *testing.T) {
	is := &issuer{byGen: map[string]string{}}
	h := newHarness(t, is.reseal)
	ctx := tctx(t)
	src, err := h.m.Create(ctx, sandbox.CreateOptions{Name: "cases"})
	if err != nil {
		t.Fatal(err)
	}
	h.putTree(t, src.ID, filepath.Join(repoRoot(), "sdk", "python"), sdkPython)
	// The source's first token: sandbox.CreateOptions has no secrets (reseal delivers them to
	// every copy), so the harness plays the issuer's first delivery; "old" is a secret the
	// copies are no longer given.
	h.sh(t, src.ID, "mkdir -p /run/secrets && printf %s "+shq(is.mint(src.Generation))+" > /run/secrets/token && echo x > /run/secrets/old")
	// BH-20: what the template has, then per-machine secrets as an image might carry them.
	if got := h.sh(t, src.ID, "ls /etc/ssh/ssh_host_* /var/lib/systemd/random-seed 2>/dev/null || true"); got != "" {
		t.Errorf("the default root already holds host keys or a random seed: %q", got)
	}
	h.sh(t, src.ID, "mkdir -p /etc/ssh /var/lib/systemd && ssh-keygen -q -N '' -t ed25519 -f /etc/ssh/ssh_host_ed25519_key"+
		" && head -c 512 /dev/urandom > /var/lib/systemd/random-seed")
	for name, text := range casePrograms {
		if err := h.m.PutFile(ctx, src.ID, "/opt/cases/"+name+".py", 0o644, strings.NewReader(text)); err != nil {
			t.Fatal(err)
		}
		h.start(t, src.ID, proc{name: name, argv: []string{"/usr/bin/python3", "/opt/cases/" + name + ".py"},
			env: []string{"PYTHONPATH=" + sdkPython}})
	}
	for name := range casePrograms {
		h.waitReady(t, src.ID, name)
	}
	// The interpreter: BH-02 (reseal reseeds it), BH-17 (its output is never held back),
	// BH-19 (temp names).
	_, warmOut := h.runCode(t, ctx, src.ID, "import os, random, sys, tempfile\nrandom.random(); next(tempfile._get_candidate_names())\n"+
		"sys.stdout.write('interp-marker\\n')")
	if warmOut != "interp-marker\n" {
		t.Errorf("the interpreter's unflushed write before the checkpoint reached the caller as %q", warmOut)
	}
	srcShell := shellFacts(t, h, src.ID)
	cp, err := h.m.Checkpoint(ctx, src.ID, "cases")
	if err != nil {
		t.Fatal(err)
	}

	time.Sleep(time.Second)
	early := h.forkN(t, src.ID, cp, 1)[0]
	skew1 := h.skew(t, early.ID)
	if err := h.m.Remove(ctx, early.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(cp.CreatedAt.Add(4 * time.Second)))
	var copies []*copyResult
	for i, k := range h.forkN(t, src.ID, cp, 4) {
		copies = append(copies, h.collectCase(t, fmt.Sprintf("clone %d", i), k.ID, k.Generation))
	}
	time.Sleep(time.Until(cp.CreatedAt.Add(10 * time.Second)))
	rb, err := h.m.Rollback(ctx, src.ID, cp.ID)
	if err != nil {
		t.Fatal(err)
	}
	rbRes := h.collectCase(t, "rollback", rb.ID, rb.Generation)
	all := append(append([]*copyResult{}, copies...), rbRes)
	t.Logf("BH-22: skew after 1 s as an image %.3f s", skew1)

	t.Run("BH-02", func(t *testing.T) { checkBH02(t, all) })
	t.Run("BH-03", func(t *testing.T) { checkBH03(t, copies) })
	t.Run("BH-17", func(t *testing.T) { checkBH17(t, all) })
	t.Run("BH-19", func(t *testing.T) { checkBH19(t, all) })
	t.Run("BH-20", func(t *testing.T) { checkBH20(t, srcShell, all) })
	t.Run("BH-22", func(t *testing.T) { checkBH22(t, skew1, all) })
	t.Run("BH-23", func(t *testing.T) { checkBH23(t, all) })
	t.Run("BH-24", func(t *testing.T) { checkBH24(t, is, src.Generation, all) })
}

// skew pokes bh22 in id with the host's time and returns guest minus host, in seconds.
func (h *harness) skew(t *testing.T, id string) float64 {
	r := h.report(t, id, "bh22", fmt.Sprintf("%.6f", float64(time.Now().UnixMicro())/1e6))
	var s float64
	_ = json.Unmarshal(r["skew"], &s)
	return s
}

// shellFacts reads BH-20's identity facts in sandbox id.
func shellFacts(t *testing.T, h *harness, id string) map[string]string {
	out := h.sh(t, id, `cat /etc/machine-id; cat /proc/sys/kernel/random/boot_id; hostname; cat /run/zygo/generation; echo
ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub 2>/dev/null || echo no-key
[ -e /var/lib/systemd/random-seed ] && sha256sum /var/lib/systemd/random-seed || echo no-seed`)
	l := strings.Split(strings.TrimSpace(out), "\n")
	if len(l) != 6 {
		t.Fatalf("identity facts in %s: %q", id, out)
	}
	return map[string]string{"machine-id": l[0], "boot_id": l[1], "hostname": l[2], "generation": l[3], "host key": l[4], "random-seed": l[5]}
}

// collectCase pokes every case program in copy id and gathers what the copy shows.
func (h *harness) collectCase(t *testing.T, label, id, gen string) *copyResult {
	c := &copyResult{label: label, id: id, gen: gen, rep: map[string]map[string]json.RawMessage{}}
	c.rep["bh22"] = map[string]json.RawMessage{"skew": json.RawMessage(fmt.Sprint(h.skew(t, id)))}
	for _, name := range []string{"bh02", "bh02w", "bh03", "bh23", "bh24"} {
		c.rep[name] = h.report(t, id, name, "go")
	}
	h.poke(t, id, "bh17", id)
	c.bh17 = h.waitOut(t, id, "bh17", 30*time.Second, func(s string) bool { return strings.Contains(s, "child ") })
	ctx := tctx(t)
	v, _ := h.runCode(t, ctx, id, "str(random.getrandbits(64))")
	_, out := h.runCode(t, ctx, id, "print('child')")
	p, _ := h.runCode(t, ctx, id, "name = next(tempfile._get_candidate_names())\npath = '/tmp/job-' + name\n"+
		"with open(path, 'x') as f: f.write("+fmt.Sprintf("%q", label)+")\n(path, tempfile.gettempdir())")
	c.interp = map[string]string{"random": v, "output": out, "tmp": p}
	c.tmpListing = strings.TrimSpace(h.sh(t, id, "ls /tmp/ | grep '^job-' || true"))
	c.shell = shellFacts(t, h, id)
	return c
}

func field[T any](t *testing.T, c *copyResult, prog, key string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(c.rep[prog][key], &v); err != nil {
		t.Fatalf("%s in %s: decoding %s=%s: %v", prog, c.label, key, c.rep[prog][key], err)
	}
	return v
}

// BH-02: a user process's generator is the same in every copy unless it uses the helper; with
// it (and in Zygo's interpreter, which reseal reseeds) every copy draws its own. The helper sees
// the copy's own generation when the copy's first request reaches it.
func checkBH02(t *testing.T, all []*copyResult) {
	plain, watched, interp := map[string]string{}, map[string]string{}, map[string]string{}
	same := map[string]bool{}
	for _, c := range all {
		plain[c.label] = str(c.rep["bh02"]["v"])
		same[plain[c.label]] = true
		watched[c.label] = str(c.rep["bh02w"]["v"])
		interp[c.label] = c.interp["random"]
		if g := field[string](t, c, "bh02w", "generation"); g != c.gen {
			t.Errorf("%s: the process saw generation %s, the copy's is %s", c.label, g, c.gen)
		}
	}
	if len(same) != 1 {
		t.Errorf("without the helper a running process's random.getrandbits should repeat in every copy (documented), got %v", plain)
	}
	distinct(t, "random.getrandbits(64) in a process using zygo_sandbox.auto_reseed", watched)
	distinct(t, "random.getrandbits(64) in the code interpreter", interp)
}

// BH-03: the kernel's randomness (os.urandom, /proc/sys/kernel/random/uuid, uuid4) differs
// across the copies on the first read after the restore, not only after the poke. On gVisor
// every getrandom is served from the host (docs/sandboxes.md, "Is gVisor's randomness
// host-backed on every call?"), so this holds even for a read that precedes reseal.
func checkBH03(t *testing.T, clones []*copyResult) {
	cols := map[string]map[string]string{}
	before := 0
	for _, c := range clones {
		var r struct {
			First map[string]any `json:"first"`
			Poke  map[string]any `json:"poke"`
		}
		_ = json.Unmarshal(mustJSON(c.rep["bh03"]), &r)
		if r.First == nil {
			t.Fatalf("%s: the BH-03 process never noticed the restore", c.label)
		}
		if r.First["resealed_already"] == false {
			before++
		}
		for _, k := range []string{"urandom", "uuid_file", "uuid4"} {
			for when, m := range map[string]map[string]any{"first read after restore": r.First, "read after the poke": r.Poke} {
				key := k + ", " + when
				if cols[key] == nil {
					cols[key] = map[string]string{}
				}
				cols[key][c.label] = fmt.Sprint(m[k])
			}
		}
	}
	for k, vals := range cols {
		distinct(t, k, vals)
	}
	t.Logf("BH-03: %d of %d clones made their first read before reseal had published the generation", before, len(clones))
}

func mustJSON(m map[string]json.RawMessage) []byte {
	b, _ := json.Marshal(m)
	return b
}

// BH-17: the line in the buffer at the checkpoint is written once by each copy, into that
// copy's own file, followed by the copy's own line; nothing is lost or doubled. Zygo's own
// interpreter never holds output across a call, so nothing of the source's reappears.
func checkBH17(t *testing.T, all []*copyResult) {
	for _, c := range all {
		if want := "warmup-marker\nchild " + c.id + "\n"; c.bh17 != want {
			t.Errorf("%s: stdout %q, want %q", c.label, c.bh17, want)
		}
		if c.interp["output"] != "child\n" {
			t.Errorf("%s: the interpreter's output %q carries something from before the checkpoint", c.label, c.interp["output"])
		}
	}
}

// BH-19: temp names drawn in each copy are distinct, creating them with 'x' never fails, and
// /tmp is private: each copy sees only its own file.
func checkBH19(t *testing.T, all []*copyResult) {
	paths, watched, plain := map[string]string{}, map[string]string{}, map[string]bool{}
	for _, c := range all {
		paths[c.label] = c.interp["tmp"]
		if !strings.HasSuffix(c.interp["tmp"], ", '/tmp')") {
			t.Errorf("%s: tempfile.gettempdir() is not /tmp: %s", c.label, c.interp["tmp"])
		}
		if strings.Count(c.tmpListing, "job-") != 1 {
			t.Errorf("%s sees temp files %q, want only its own", c.label, c.tmpListing)
		}
		watched[c.label] = str(c.rep["bh02w"]["tmpname"])
		plain[str(c.rep["bh02"]["tmpname"])] = true
	}
	distinct(t, "temp paths made in the interpreter", paths)
	distinct(t, "temp names in a process using zygo_sandbox", watched)
	if len(plain) != 1 {
		t.Errorf("a process without the helper: temp names %v; expected the same name everywhere (documented; harmless, /tmp is per copy)", plain)
	}
}

// BH-20: machine-id, hostname and the generation (the documented replacement for boot_id,
// which gVisor keeps) differ in every copy; the template's SSH host key is replaced and its
// random seed removed in every copy.
func checkBH20(t *testing.T, src map[string]string, all []*copyResult) {
	cols := map[string]map[string]string{}
	for _, c := range all {
		for k, v := range c.shell {
			if cols[k] == nil {
				cols[k] = map[string]string{"source": src[k]}
			}
			cols[k][c.label] = v
		}
		if c.shell["random-seed"] != "no-seed" {
			t.Errorf("%s: the template's random-seed survived: %s", c.label, c.shell["random-seed"])
		}
		if c.shell["host key"] == "no-key" {
			t.Errorf("%s: the host key was removed, not regenerated (ssh-keygen is in /usr/bin)", c.label)
		}
	}
	for _, k := range []string{"machine-id", "hostname", "generation", "host key"} {
		distinct(t, k+" (source and every copy)", cols[k])
	}
	boot := map[string]bool{}
	for _, v := range cols["boot_id"] {
		boot[v] = true
	}
	if len(boot) != 1 {
		t.Logf("boot_id differs across copies now (%d values): docs/sandboxes.md says gVisor keeps it", len(boot))
	}
}

// BH-22: the wall clock agrees with the host's within ±0.5 s on the first read, whether the
// copy spent 1 s, 4 s or 10 s as an image.
func checkBH22(t *testing.T, skew1 float64, all []*copyResult) {
	skews := map[string]float64{"fork after 1 s": skew1}
	for _, c := range all {
		skews[c.label] = field[float64](t, c, "bh22", "skew")
	}
	for who, s := range skews {
		if math.Abs(s) > 0.5 {
			t.Errorf("%s: wall clock skew %.3f s, want within ±0.5 s", who, s)
		}
	}
	t.Logf("BH-22 skews (s): %v", skews)
}

// BH-23: the monotonic clock never steps backwards, on any CPU; it jumps forward by the time
// the copy spent as an image (docs/sandboxes.md, "Clock policy"): wall and monotonic advance
// alike, so the 2 s timeout armed before the checkpoint has expired, and suspended_ns says how
// long the image waited.
func checkBH23(t *testing.T, all []*copyResult) {
	for _, c := range all {
		jump, wall := field[float64](t, c, "bh23", "jump"), field[float64](t, c, "bh23", "wall")
		susp := field[float64](t, c, "bh23", "suspended_s")
		if field[bool](t, c, "bh23", "backwards") {
			t.Errorf("%s: the monotonic clock stepped backwards across CPUs", c.label)
		}
		if math.Abs(jump-wall) > 0.5 {
			t.Errorf("%s: monotonic advanced %.2f s while the wall clock advanced %.2f s; the policy is that they agree", c.label, jump, wall)
		}
		if susp < 3.5 || jump < susp {
			t.Errorf("%s: suspended %.2f s, monotonic jump %.2f s; want ≥ 3.5 s and the jump to include it", c.label, susp, jump)
		}
		if !field[bool](t, c, "bh23", "expired") {
			t.Errorf("%s: a 2 s timeout armed before the checkpoint has not expired after %.1f s", c.label, jump)
		}
		t.Logf("BH-23 %s: jump %.2f s, wall %.2f s, suspended %.2f s, %d CPUs", c.label, jump, wall, susp, field[int](t, c, "bh23", "cpus"))
	}
}

// BH-24: every copy is delivered a fresh token of its own through /run/secrets; the token
// fetched before the checkpoint is accepted only for the source's generation, and a secret the
// copies are no longer given is gone.
func checkBH24(t *testing.T, is *issuer, srcGen string, all []*copyResult) {
	fresh := map[string]string{}
	var old string
	for g, tok := range is.byGen {
		if g == srcGen {
			old = tok
		}
	}
	for _, c := range all {
		if field[bool](t, c, "bh24", "same") {
			t.Errorf("%s: the token after the restore is the one fetched before it", c.label)
		}
		fresh[c.label] = field[string](t, c, "bh24", "fresh")
		if !is.accepts(fresh[c.label], c.gen) {
			t.Errorf("%s: the issuer does not accept the copy's fresh token", c.label)
		}
		if is.accepts(old, c.gen) {
			t.Errorf("%s: the issuer accepts the token fetched before the checkpoint", c.label)
		}
		if field[bool](t, c, "bh24", "old_file") {
			t.Errorf("%s: /run/secrets/old is still delivered", c.label)
		}
	}
	distinct(t, "fresh tokens", fresh)
}
