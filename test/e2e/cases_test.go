package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// The cases of ../shared/cases/fork-safety-cases.md, as FORK-N tests: the
// warm-up block runs once in the zygote, then N children each run the
// handler once with event {"id": "<i>"}, concurrently unless noted.

func forkN(t *testing.T, d *Daemon, name string, n, conc int) []json.RawMessage {
	t.Helper()
	return d.InvokeMany(name, n, conc, func(i int) any { return map[string]any{"id": fmt.Sprint(i)} })
}

func TestCaseBH01_NumpyGlobalRNG(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(fixture("bh01"))
	var nps, stds []int64
	for _, raw := range forkN(t, d, "bh01", 11, 11) {
		var pair [2]int64
		json.Unmarshal(raw, &pair)
		nps, stds = append(nps, pair[0]), append(stds, pair[1])
	}
	if n := distinct(nps); n != 11 {
		t.Errorf("NumPy draws: %d distinct of 11: %v", n, nps)
	}
	if n := distinct(stds); n != 11 {
		t.Errorf("stdlib random draws (control): %d distinct of 11", n)
	}
	if !strings.Contains(strings.Join(d.Logs("bh01", ""), "\n"), "numpy_global") {
		t.Errorf("warm-up did not warn that the NumPy global generator was used at import")
	}
}

func TestCaseBH04_OpenSSLRandBytes(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(fixture("bh04"))
	var vals []string
	for _, raw := range forkN(t, d, "bh04", 11, 11) {
		vals = append(vals, string(raw))
	}
	if n := distinct(vals); n != 11 {
		t.Fatalf("ssl.RAND_bytes: %d distinct of 11: %v", n, vals)
	}
	if !strings.Contains(strings.Join(d.Logs("bh04", ""), "\n"), "libcrypto") {
		t.Errorf("warm-up did not record the libcrypto version")
	}
}

func TestCaseBH09_UUID1(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(fixture("bh09"))
	var all []string
	for _, raw := range forkN(t, d, "bh09", 11, 11) {
		var three []string
		json.Unmarshal(raw, &three)
		all = append(all, three...)
	}
	if len(all) != 33 || distinct(all) != 33 {
		t.Fatalf("uuid1: %d distinct of %d", distinct(all), len(all))
	}
	if !strings.Contains(strings.Join(d.Logs("bh09", ""), "\n"), "uuid1") {
		t.Errorf("warm-up did not warn about uuid1 at import")
	}
}

func TestCaseBH11_ThreadAtWarmupFallsBack(t *testing.T) {
	d := startDaemon(t, "")
	out, _, code := d.CLI("up", fixture("bh11"))
	if code != 0 || !strings.Contains(out, "chatter") {
		t.Fatalf("zygo up did not name the thread: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "(fork → spawn fallback, ready in") || strings.Contains(out, "fork mode") {
		t.Errorf("zygo up does not say the function is served in spawn mode:\n%s", out)
	}
	logs := strings.Join(d.Logs("bh11", ""), "\n")
	if !strings.Contains(logs, "falling back to spawn mode") || !strings.Contains(logs, "chatter") {
		t.Fatalf("logs do not say the function fell back, naming chatter:\n%s", logs)
	}
	for i, raw := range forkN(t, d, "bh11", 5, 1) {
		if string(raw) != `"ok"` {
			t.Fatalf("request %d: %s", i, raw)
		}
	}
}

func TestCaseBH12_NativeThreads(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(fixture("bh12"))
	logs := strings.Join(d.Logs("bh12", ""), "\n")
	if !strings.Contains(logs, "zygote threads: 1") {
		t.Fatalf("the zygote was not single-threaded after the BLAS warm-up:\n%s", logs)
	}
	for i, raw := range forkN(t, d, "bh12", 500, 4) {
		if string(raw) != "134217728.0" {
			t.Fatalf("child %d returned %s", i, raw)
		}
	}
}

func TestCaseBH14_AsyncioLoop(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(fixture("bh14"))
	for i, raw := range forkN(t, d, "bh14", 20, 4) {
		if string(raw) != `["ok", 0]` && string(raw) != `["ok",0]` {
			t.Errorf("child %d returned %s, want [\"ok\", 0]", i, raw)
		}
	}
	if strings.Contains(strings.Join(d.Logs("bh14", ""), "\n"), "zygote timer") {
		t.Errorf("the zygote's timer fired in a child")
	}
}

func TestCaseBH17_BufferedStdout(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(fixture("bh17"))
	forkN(t, d, "bh17", 11, 4)
	lines := d.Logs("bh17", "")
	if n := countLines(lines, "stdout warmup-marker"); n != 1 {
		t.Errorf("warmup-marker appears %d times, want 1", n)
	}
	for i := 0; i < 11; i++ {
		if n := countLines(lines, fmt.Sprintf("stdout child %d", i)); n != 1 {
			t.Errorf("child %d's line appears %d times, want 1", i, n)
		}
	}
}

func TestCaseBH18_Atexit(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(fixture("bh18"))
	forkN(t, d, "bh18", 10, 1)
	var alive bool
	d.Invoke("bh18", map[string]any{"check": true}, &alive)
	if !alive {
		t.Fatal("/tmp/zygote.alive is gone: the zygote's atexit ran in a child")
	}
	lines := d.Logs("bh18", "")
	for i := 0; i < 10; i++ {
		if n := countLines(lines, fmt.Sprintf("stdout child-exit %d", i)); n != 1 {
			t.Errorf("child-exit %d printed %d times, want 1", i, n)
		}
	}
}

func TestCaseBH19_TempNames(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(fixture("bh19"))
	var paths, tmps []string
	for i, raw := range forkN(t, d, "bh19", 11, 11) {
		var r [3]string
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("child %d: %s", i, raw)
		}
		if r[2] != fmt.Sprint(i) {
			t.Errorf("child %d's file holds %q", i, r[2])
		}
		paths, tmps = append(paths, r[0]), append(tmps, r[1])
	}
	if distinct(paths) != 11 || distinct(tmps) != 11 {
		t.Fatalf("paths %d distinct, gettempdir %d distinct, of 11: %v %v", distinct(paths), distinct(tmps), paths, tmps)
	}
}

// TestWarmupGenerators covers point 6 of the issue: generator objects made
// at import are named and reseeded unless explicitly seeded; a socket
// opened at import is named.
func TestWarmupGenerators(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(fixture("generators"))
	type r struct {
		Implicit, Explicit, NpImplicit, NpExplicit float64
	}
	var res []r
	for _, raw := range forkN(t, d, "generators", 6, 3) {
		var x struct {
			Implicit   float64 `json:"implicit"`
			Explicit   float64 `json:"explicit"`
			NpImplicit float64 `json:"np_implicit"`
			NpExplicit float64 `json:"np_explicit"`
		}
		json.Unmarshal(raw, &x)
		res = append(res, r(x))
	}
	col := func(f func(r) float64) []float64 {
		var out []float64
		for _, x := range res {
			out = append(out, f(x))
		}
		return out
	}
	if n := distinct(col(func(x r) float64 { return x.Implicit })); n != 6 {
		t.Errorf("random.Random() made at import: %d distinct of 6", n)
	}
	if n := distinct(col(func(x r) float64 { return x.Explicit })); n != 1 {
		t.Errorf("random.Random(42) made at import: %d distinct of 6, want deterministic", n)
	}
	if n := distinct(col(func(x r) float64 { return x.NpImplicit })); n != 6 {
		t.Errorf("np.random.default_rng() made at import: %d distinct of 6", n)
	}
	if n := distinct(col(func(x r) float64 { return x.NpExplicit })); n != 1 {
		t.Errorf("np.random.default_rng(7) made at import: %d distinct of 6, want deterministic", n)
	}
	logs := strings.Join(d.Logs("generators", ""), "\n")
	for _, want := range []string{"IMPLICIT", "EXPLICIT", "NP_IMPLICIT", "LISTENER"} {
		if !strings.Contains(logs, want) {
			t.Errorf("warm-up report does not name %s:\n%s", want, logs)
		}
	}
}

// TestLoadNumpyExample: 500 requests at concurrency 8 to the NumPy
// example, none lost, every result accounted for.
func TestLoadNumpyExample(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(fixture("../../../examples/stats"))
	vals := d.InvokeMany("stats", 500, 8, func(i int) any { return map[string]any{"n": 10 + i%50} })
	seen := map[int64]bool{}
	for i, raw := range vals {
		var r struct {
			N    int   `json:"n"`
			Draw int64 `json:"draw"`
		}
		if err := json.Unmarshal(raw, &r); err != nil || r.N != 10+i%50 {
			t.Fatalf("request %d: result %s does not answer its own event", i, raw)
		}
		seen[r.Draw] = true
	}
	if len(seen) != 500 {
		t.Fatalf("%d distinct draws of 500", len(seen))
	}
	st, err := d.Client.Functions(t.Context())
	if err != nil || len(st) != 1 || st[0].Served != 500 {
		t.Fatalf("served count: %+v %v", st, err)
	}
}

// TestWarmupGeneratorsOutsideGlobals: generators made at import wherever
// they live (a dict, a class attribute, a closure, a default argument, a
// bare _random.Random) are reseeded in every child; an explicitly seeded one
// stays deterministic.
func TestWarmupGeneratorsOutsideGlobals(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(fixture("hiddengen"))
	cols := map[string][]float64{}
	for _, raw := range forkN(t, d, "hiddengen", 6, 3) {
		var r map[string]float64
		json.Unmarshal(raw, &r)
		for k, v := range r {
			cols[k] = append(cols[k], v)
		}
	}
	for k, vals := range cols {
		want := 6
		if k == "explicit" {
			want = 1
		}
		if n := distinct(vals); n != want {
			t.Errorf("%s: %d distinct of 6, want %d", k, n, want)
		}
	}
	if len(cols) != 6 {
		t.Fatalf("got columns %v", cols)
	}
}
