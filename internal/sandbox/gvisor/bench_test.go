package gvisor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/gvisor"
)

// BenchmarkSandboxVsRunsc measures, in one run on one sandbox, each Zygo operation beside the
// raw runsc commands doing the same engine work, and prints the medians and their ratios.
// "Answers" means a trivial exec (/bin/true) returned: through the guest agent for Zygo, with
// runsc exec for raw runsc. Run it with scripts/bench-sandbox.sh. It is one iteration by
// design: -benchtime=1x.
func BenchmarkSandboxVsRunsc(b *testing.B) {
	reps := 5
	if s := os.Getenv("ZYGO_BENCH_REPS"); s != "" {
		fmt.Sscan(s, &reps)
	}
	var mu sync.Mutex
	var resealTimes []time.Duration
	timedReseal := func(ctx context.Context, t sandbox.ResealTarget) (guest.ResealResult, error) {
		t0 := time.Now()
		res, err := sandbox.DefaultReseal(ctx, t)
		mu.Lock()
		resealTimes = append(resealTimes, time.Since(t0))
		mu.Unlock()
		return res, err
	}
	h := newHarness(b, timedReseal)
	ctx := tctx(b)
	src, err := h.m.Create(ctx, sandbox.CreateOptions{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	h.code(b, src.ID, "import numpy, random\nx = 41\nbuf = bytearray(32 << 20)")
	h.sh(b, src.ID, "head -c 8M /dev/urandom > /root/blob")
	raw := &rawRunsc{b: b, be: h.be, dir: filepath.Join(h.dir, "raw"), limits: src.Options.Limits()}
	rows := []benchRow{}
	b.ResetTimer()

	var cp sandbox.CheckpointRecord
	rows = append(rows, benchRow{key: "checkpoint", name: "checkpoint (source paused)", n: 1,
		zygo: measure(reps, func() {
			var err error
			if cp, err = h.m.Checkpoint(ctx, src.ID, ""); err != nil {
				b.Fatal(err)
			}
		}),
		raw: measure(reps, func() { raw.checkpoint(ctx, src.EngineID) }),
	})
	rows = append(rows, benchRow{key: "restore", name: "restore 1, until it answers", n: 1,
		zygo: measure(reps, func() { h.forkAndAnswer(b, src.ID, cp.ID, 1) }),
		raw:  measure(reps, func() { raw.restoreAndAnswer(ctx, cp.Dir, 1) }),
	})
	rows = append(rows, benchRow{key: "fork11", name: "fork 11, until all answer", n: 11,
		zygo: measure(max(2, reps/2), func() { h.forkAndAnswer(b, src.ID, cp.ID, 11) }),
		raw:  measure(max(2, reps/2), func() { raw.restoreAndAnswer(ctx, cp.Dir, 11) }),
	})
	rows = append(rows, benchRow{key: "rollback", name: "rollback, until it answers", n: 1,
		zygo: measure(reps, func() {
			if _, err := h.m.Rollback(ctx, src.ID, cp.ID); err != nil {
				b.Fatal(err)
			}
			h.sh(b, src.ID, "true")
		}),
		raw: measure(reps, func() { raw.rollback(ctx, cp.Dir) }),
	})
	b.StopTimer()
	printRows(b, rows, resealTimes)
	raw.cleanup(context.Background())
}

type benchRow struct {
	key, name string
	n         int
	zygo, raw time.Duration
}

func measure(reps int, fn func()) time.Duration {
	var ds []time.Duration
	for range reps {
		t0 := time.Now()
		fn()
		ds = append(ds, time.Since(t0))
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func printRows(b *testing.B, rows []benchRow, reseal []time.Duration) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-30s %12s %12s %8s\n", "operation (median)", "zygo", "raw runsc", "ratio")
	for _, r := range rows {
		fmt.Fprintf(&sb, "%-30s %12s %12s %7.2fx\n", r.name, r.zygo.Round(time.Millisecond), r.raw.Round(time.Millisecond),
			float64(r.zygo)/float64(r.raw))
		b.ReportMetric(float64(r.zygo.Milliseconds()), r.key+"-zygo-ms")
		b.ReportMetric(float64(r.zygo)/float64(r.raw), r.key+"-ratio")
	}
	slices.Sort(reseal)
	if len(reseal) > 0 {
		fmt.Fprintf(&sb, "reseal round trip per copy: median %s, max %s over %d copies (inside the zygo column)\n",
			reseal[len(reseal)/2].Round(time.Millisecond), reseal[len(reseal)-1].Round(time.Millisecond), len(reseal))
	}
	fmt.Print(sb.String())
}

// forkAndAnswer forks n children from cp, execs /bin/true in each in parallel, removes them.
func (h *harness) forkAndAnswer(b *testing.B, srcID, cpID string, n int) {
	ctx := tctx(b)
	res, err := h.m.Fork(ctx, srcID, sandbox.ForkOptions{N: n, From: cpID})
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
	b.StopTimer()
	for _, c := range res.Children {
		_ = h.m.Remove(ctx, c.Sandbox.ID)
	}
	b.StartTimer()
}

// rawRunsc does the same engine work with plain runsc commands.
type rawRunsc struct {
	b    *testing.B
	be   *gvisor.Backend
	dir  string
	n    int
	live []string // raw containers alive (the rollback target)
	// limits are the source's: a restore must carry the image's.
	limits sandbox.Limits
}

func (r *rawRunsc) run(ctx context.Context, args ...string) {
	if out, err := gvisor.RunscForTest(r.be, ctx, args...); err != nil {
		r.b.Fatalf("runsc %v: %v %s", args, err, out)
	}
}

func (r *rawRunsc) checkpoint(ctx context.Context, id string) {
	r.n++
	img := filepath.Join(r.dir, fmt.Sprintf("img-%d", r.n))
	os.MkdirAll(img, 0o700)
	r.run(ctx, "checkpoint", "--leave-running", "--image-path="+img, id)
}

// restoreOne restores img as a new raw container and waits until runsc exec answers.
func (r *rawRunsc) restoreOne(ctx context.Context, img string, i int) string {
	id := fmt.Sprintf("raw-%d-%d", time.Now().UnixNano()%1e9, i)
	if err := gvisor.RawRestoreForTest(r.be, ctx, filepath.Join(r.dir, id), id, img, r.limits); err != nil {
		r.b.Fatalf("raw restore: %v", err)
	}
	r.run(ctx, "exec", id, "/bin/true")
	return id
}

func (r *rawRunsc) restoreAndAnswer(ctx context.Context, img string, n int) {
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() { ids[i] = r.restoreOne(ctx, img, i) })
	}
	wg.Wait()
	r.b.StopTimer()
	for _, id := range ids {
		r.remove(ctx, id)
	}
	r.b.StartTimer()
}

// rollback restores a new copy, waits for it to answer, then deletes the previous one.
func (r *rawRunsc) rollback(ctx context.Context, img string) {
	id := r.restoreOne(ctx, img, 0)
	for _, old := range r.live {
		r.remove(ctx, old)
	}
	r.live = []string{id}
}

func (r *rawRunsc) remove(ctx context.Context, id string) {
	_, _ = gvisor.RunscForTest(r.be, ctx, "delete", "--force", id)
	_ = os.RemoveAll(filepath.Join(r.dir, id))
}

func (r *rawRunsc) cleanup(ctx context.Context) {
	for _, id := range r.live {
		r.remove(ctx, id)
	}
	_ = os.RemoveAll(r.dir)
}
