package gvisor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/gvisor"
)

// resealSteps is the order of ResealResult.Steps (internal/guest/reseal.go).
var resealSteps = []string{"clock", "entropy", "identity", "host_keys", "secrets", "generation", "token", "services", "interpreter", "sample"}

// BenchmarkResealCost measures, in one run on one checkpoint, what reseal adds to a fork of 11:
// rounds of "fork 11 with reseal" and "fork 11 without reseal" alternate, and the medians of
// both are printed with their difference, beside the reseal round trip per copy, the time of
// each step inside the guest, and the first run-code in a copy (where the interpreter's reseed,
// deferred by reseal to the next run-code, is paid).
//
// "Without reseal" is a test-only ResealFunc that acknowledges without calling the guest: the
// copies keep the image's token, generation and identity, so they answer but are not
// independent. It exists only here, for this measurement; the Manager has no such option.
//
//	go test ./internal/sandbox/gvisor/ -run '^$' -bench BenchmarkResealCost -benchtime 1x
//
// ZYGO_BENCH_REPS sets the rounds of each kind (default 3).
func BenchmarkResealCost(b *testing.B) {
	reps := 3
	if s := os.Getenv("ZYGO_BENCH_REPS"); s != "" {
		fmt.Sscan(s, &reps)
	}
	var skip atomic.Bool
	var mu sync.Mutex // guards trips and steps
	var trips []time.Duration
	steps := map[string][]time.Duration{}
	published := &publishedGens{m: map[string]string{}}
	reseal := func(ctx context.Context, t sandbox.ResealTarget) (guest.ResealResult, error) {
		if skip.Load() {
			published.set(t.Sandbox.EngineID, t.Sandbox.Generation)
			return guest.ResealResult{Generation: t.Sandbox.Generation}, nil
		}
		t0 := time.Now()
		res, err := sandbox.DefaultReseal(ctx, t)
		mu.Lock()
		defer mu.Unlock()
		trips = append(trips, time.Since(t0))
		for k, d := range res.Steps {
			steps[k] = append(steps[k], d)
		}
		return res, err
	}
	h := newHarness(b, reseal)
	// Without reseal there is nothing to verify through the engine either: the
	// wrapper answers the out-of-band check from what the no-op reseal noted.
	m, err := sandbox.NewManager(sandbox.ManagerConfig{Backend: &noVerifyWhenSkipped{Backend: h.be, skip: &skip, gens: published},
		Registry: h.reg, ImageDir: filepath.Join(h.dir, "images"), Reseal: reseal, ReadyTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	h.m = m
	ctx := tctx(b)
	src, err := h.m.Create(ctx, sandbox.CreateOptions{Name: "bench", Services: []guest.Service{
		{Name: "kept", Argv: []string{"/bin/sleep", "1000000"}},
		{Name: "told", OnFork: guest.OnForkSignal, Argv: []string{"/bin/sh", "-c", "trap : HUP; while :; do sleep 1; done"}},
	}})
	if err != nil {
		b.Fatal(err)
	}
	h.code(b, src.ID, "import numpy, random\nx = 41\nbuf = bytearray(32 << 20)")
	h.sh(b, src.ID, "head -c 8M /dev/urandom > /root/blob")
	cp, err := h.m.Checkpoint(ctx, src.ID, "")
	if err != nil {
		b.Fatal(err)
	}
	kinds := []string{"with reseal", "without reseal"}
	forked, answered, firstCode := map[string][]time.Duration{}, map[string][]time.Duration{}, map[string][]time.Duration{}
	b.ResetTimer()
	for range reps {
		for _, kind := range kinds {
			skip.Store(kind == "without reseal")
			f, a, c := h.forkTimed(b, src.ID, cp.ID, 11)
			forked[kind] = append(forked[kind], f)
			answered[kind] = append(answered[kind], a)
			firstCode[kind] = append(firstCode[kind], c...)
		}
	}
	b.StopTimer()
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nfork of 11 from one checkpoint, %d rounds of each, alternating (medians)\n", reps)
	fmt.Fprintf(&sb, "%-40s %14s %14s %10s\n", "", "with reseal", "without", "added")
	row := func(name string, m map[string][]time.Duration) {
		w, wo := median(m["with reseal"]), median(m["without reseal"])
		fmt.Fprintf(&sb, "%-40s %14s %14s %10s\n", name, w.Round(time.Millisecond), wo.Round(time.Millisecond), (w - wo).Round(time.Millisecond))
	}
	row("Fork returns (11 Running)", forked)
	row("all 11 answer an exec", answered)
	row("first run-code in a copy (per copy)", firstCode)
	b.ReportMetric(float64((median(forked["with reseal"]) - median(forked["without reseal"])).Milliseconds()), "reseal-added-fork11-ms")
	fmt.Fprintf(&sb, "reseal round trip per copy: median %s, p90 %s, max %s over %d copies\n",
		median(trips).Round(time.Microsecond), pct(trips, 0.9).Round(time.Microsecond), pct(trips, 1).Round(time.Microsecond), len(trips))
	fmt.Fprintf(&sb, "inside the guest, per copy (median):")
	var sum time.Duration
	for _, k := range resealSteps {
		sum += median(steps[k])
		fmt.Fprintf(&sb, " %s %s;", k, median(steps[k]).Round(time.Microsecond))
	}
	fmt.Fprintf(&sb, " sum %s\n", sum.Round(time.Microsecond))
	fmt.Print(sb.String())
}

// forkTimed forks n children from cp and returns how long Fork took, how long until every
// child answered an exec, and the first run-code in each child; then it removes them.
func (h *harness) forkTimed(b *testing.B, srcID, cpID string, n int) (time.Duration, time.Duration, []time.Duration) {
	ctx := tctx(b)
	t0 := time.Now()
	res, err := h.m.Fork(ctx, srcID, sandbox.ForkOptions{N: n, From: cpID})
	forked := time.Since(t0)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, c := range res.Children {
		if c.Err != nil {
			b.Fatalf("fork child: %v", c.Err)
		}
		wg.Go(func() { h.sh(b, c.Sandbox.ID, "true") })
	}
	wg.Wait()
	answered := time.Since(t0)
	code := make([]time.Duration, len(res.Children))
	for i, c := range res.Children {
		wg.Go(func() {
			t := time.Now()
			h.code(b, c.Sandbox.ID, "x")
			code[i] = time.Since(t)
		})
	}
	wg.Wait()
	for _, c := range res.Children {
		_ = h.m.Remove(ctx, c.Sandbox.ID)
	}
	return forked, answered, code
}

func median(ds []time.Duration) time.Duration { return pct(ds, 0.5) }

// pct returns the p-quantile of ds (nearest rank), 0 for none.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p * float64(len(s)))
	return s[min(i, len(s)-1)]
}

// publishedGens remembers the generation the no-op reseal gave each engine instance.
type publishedGens struct {
	mu sync.Mutex
	m  map[string]string
}

func (p *publishedGens) set(id, gen string) { p.mu.Lock(); p.m[id] = gen; p.mu.Unlock() }
func (p *publishedGens) get(id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[id]
}

// noVerifyWhenSkipped is the gVisor backend, except that while the benchmark measures forks
// without reseal, the out-of-band generation check is answered without running runsc exec.
type noVerifyWhenSkipped struct {
	*gvisor.Backend
	skip *atomic.Bool
	gens *publishedGens
}

func (n *noVerifyWhenSkipped) ReadGeneration(ctx context.Context, id string) (string, error) {
	if n.skip.Load() {
		return n.gens.get(id), nil
	}
	return n.Backend.ReadGeneration(ctx, id)
}
