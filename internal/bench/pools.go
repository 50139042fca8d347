package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// RunScripts runs n requests of req in pool with conc in flight and returns
// their latency statistics; any failed request is an error. next, when not
// nil, gives request i its own request (a new tenant or script).
func RunScripts(ctx context.Context, c *zygo.Client, pool string, n, conc int, next func(i int) wire.PoolRunRequest) (Stats, error) {
	st, err := runEach(n, conc, func(i int) error {
		_, err := c.RunScript(ctx, pool, next(i))
		return err
	})
	if err != nil {
		return Stats{}, fmt.Errorf("running a script in %s: %w", pool, err)
	}
	return st, nil
}

// runEach runs do(0..n-1), each in a goroutine of its own with conc in
// flight (the SDK's client's way), and returns their latency statistics;
// the first failure is the error.
func runEach(n, conc int, do func(i int) error) (Stats, error) {
	lat := make([]time.Duration, n)
	errs := make([]error, n)
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t := time.Now()
			errs[i] = do(i)
			lat[i] = time.Since(t)
		}()
	}
	wg.Wait()
	wall := time.Since(t0)
	for _, err := range errs {
		if err != nil {
			return Stats{}, err
		}
	}
	return summarise(lat, wall), nil
}

// pools measures runtime pools against functions running the same code: the
// stats example's handler as a script of a pool that preloads numpy vs the
// stats function (warm, 1 client: p50 and throughput); the first run of a
// new script (upload + run) vs a new function's deploy and first invoke;
// and the PSS of one pool that has served PoolTenants tenants vs that many
// function zygotes.
func (b *runner) pools() error {
	b.say("runtime pools (the stats handler as a tenant's script; pool preload = [\"numpy\"])")
	src, err := os.ReadFile(filepath.Join(b.cfg.Root, "examples", "stats", "main.py"))
	if err != nil {
		return err
	}
	if _, err := b.c.PoolUp(b.ctx, []byte("kind = \"pool\"\nname = \"bench\"\npreload = [\"numpy\"]\nconcurrency = 64\n[tenant]\nconcurrency = 8\nqueue = 1000\n")); err != nil {
		return err
	}
	ev := json.RawMessage(`{"n": 100}`)
	first, err := b.c.RunScript(b.ctx, "bench", wire.PoolRunRequest{Tenant: "t0", Source: string(src), Event: ev})
	if err != nil {
		return err
	}
	same := func(int) wire.PoolRunRequest {
		return wire.PoolRunRequest{Tenant: "t0", Script: first.Script, Event: ev}
	}
	if _, err := RunScripts(b.ctx, b.c, "bench", 20, 4, same); err != nil {
		return err
	}
	warm, err := RunScripts(b.ctx, b.c, "bench", b.cfg.N, 1, same)
	if err != nil {
		return err
	}
	// The same moment's function figure, through the same client as the pool's runs (the
	// SDK's; the warm series use invokeConn).
	fn, err := runEach(b.cfg.N, 1, func(int) error {
		_, err := b.c.Invoke(b.ctx, "stats", []byte(`{"n": 100}`))
		return err
	})
	if err != nil {
		return fmt.Errorf("invoking stats: %w", err)
	}
	r := ratio(warm.P50, fn.P50)
	b.add(fmt.Sprintf("warm pool run vs the stats function, 1 client (%d each)", warm.N),
		fmt.Sprintf("pool p50 %.2f ms, %.0f req/s; function p50 %.2f ms, %.0f req/s", ms(warm.P50), warm.Throughput, ms(fn.P50), fn.Throughput),
		fmt.Sprintf("p50 pool/function = %.2fx, throughput = %.2fx (target <= 1.3x: %s)", r, fn.Throughput/warm.Throughput, met(r <= 1.3)))
	if err := b.poolFirstRun(string(src), ev); err != nil {
		return err
	}
	return b.poolMemory()
}

// poolFirstRun: a new tenant's new script, uploaded inline and run, vs a
// new function's deploy and first invoke.
func (b *runner) poolFirstRun(src string, ev json.RawMessage) error {
	n := max(b.cfg.ColdN/4, 3)
	firsts, err := RunScripts(b.ctx, b.c, "bench", n, 1, func(i int) wire.PoolRunRequest {
		return wire.PoolRunRequest{Tenant: fmt.Sprintf("first-%d", i), Source: src + fmt.Sprintf("\n# %d\n", i), Event: ev}
	})
	if err != nil {
		return err
	}
	var cold []time.Duration
	for i := 0; i < n; i++ {
		dir, err := WriteFunction(b.work, fmt.Sprintf("cold-fn-%d", i), "", src)
		if err != nil {
			return err
		}
		t := time.Now()
		if err := b.deploy(dir); err != nil {
			return err
		}
		if _, err := b.c.Invoke(b.ctx, fmt.Sprintf("cold-fn-%d", i), []byte(ev)); err != nil {
			return err
		}
		cold = append(cold, time.Since(t))
		if err := b.c.RemoveFunction(b.ctx, fmt.Sprintf("cold-fn-%d", i)); err != nil {
			return err
		}
	}
	c := summarise(cold, 0)
	b.add(fmt.Sprintf("first run of a new script (upload + run) vs a new function (deploy + first invoke), %d each", n),
		fmt.Sprintf("pool p50 %.2f ms; function p50 %.2f ms", ms(firsts.P50), ms(c.P50)),
		fmt.Sprintf("function/pool = %.1fx", ratio(c.P50, firsts.P50)))
	return nil
}

// poolMemory: PSS of the pool's zygote and idle children after serving
// PoolTenants tenants, vs the sum of PoolTenants function zygotes (each with
// its idle children) that import the same module.
func (b *runner) poolMemory() error {
	k := b.cfg.PoolTenants
	code := "import numpy\n\ndef handler(event, context):\n    return 1\n"
	if _, err := RunScripts(b.ctx, b.c, "bench", k, 4, func(i int) wire.PoolRunRequest {
		return wire.PoolRunRequest{Tenant: fmt.Sprintf("mem-%d", i), Source: code}
	}); err != nil {
		return err
	}
	p, err := b.c.Pool(b.ctx, "bench")
	if err != nil {
		return fmt.Errorf("the bench pool's zygote: %w", err)
	}
	if len(p.Lanes) == 0 {
		return errors.New("the bench pool has no zygote")
	}
	poolKiB := treePSS(p.Lanes[0].HostPID)
	fnKiB := 0
	for i := 0; i < k; i++ {
		name := fmt.Sprintf("mem-fn-%d", i)
		dir, err := WriteFunction(b.work, name, "", code)
		if err != nil {
			return err
		}
		if err := b.deploy(dir); err != nil {
			return err
		}
	}
	time.Sleep(2 * time.Second) // pre-forked pools fill
	for i := 0; i < k; i++ {
		pid, err := b.zygotePID(fmt.Sprintf("mem-fn-%d", i))
		if err != nil {
			return err
		}
		fnKiB += treePSS(pid)
	}
	for i := 0; i < k; i++ {
		_ = b.c.RemoveFunction(b.ctx, fmt.Sprintf("mem-fn-%d", i))
	}
	b.add(fmt.Sprintf("PSS: one pool that served %d tenants vs %d function zygotes (numpy; idle children included)", k, k),
		fmt.Sprintf("pool %.1f MiB; functions %.1f MiB", float64(poolKiB)/1024, float64(fnKiB)/1024),
		fmt.Sprintf("functions/pool = %.1fx", float64(fnKiB)/float64(max(poolKiB, 1))))
	return nil
}

// treePSS is the PSS of pid and its children, KiB (0 for what has gone).
func treePSS(pid int) int {
	total := 0
	for _, p := range append([]int{pid}, Children(pid)...) {
		if k, err := PSSKiB(p); err == nil {
			total += k
		}
	}
	return total
}
