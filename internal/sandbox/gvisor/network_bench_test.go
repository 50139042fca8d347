package gvisor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/network"
	"github.com/zygo-run/zygo/internal/network/nettest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// BenchmarkSandboxNetworkCost measures, side by side in one run, sandbox create, fork of 11
// (until all answer) and rollback without network and with it (each instance its own
// namespace, veth, address, MAC and filter rules), and prints the medians and the ratios.
// Issue 14 asks fork of 11 with network to stay within 1.3x of it without. Run it with
// scripts/bench-sandbox.sh; -benchtime=1x.
func BenchmarkSandboxNetworkCost(b *testing.B) {
	reps := 5
	if s := os.Getenv("ZYGO_BENCH_REPS"); s != "" {
		fmt.Sscan(s, &reps)
	}
	ctx := tctx(b)
	nh, err := network.New(ctx, network.Config{Tag: nettest.Tag(), Pool: nettest.Pool()})
	if err != nil {
		b.Fatalf("network host: %v", err)
	}
	b.Cleanup(func() { _ = nh.Close(context.Background()) })
	h := newHarness(b, nil)
	m, err := sandbox.NewManager(sandbox.ManagerConfig{Backend: h.be, Registry: h.reg,
		ImageDir: filepath.Join(h.dir, "images"), ReadyTimeout: 30 * time.Second, Network: sandbox.HostNetwork{Host: nh}})
	if err != nil {
		b.Fatal(err)
	}
	plain := h.m
	type side struct {
		name string
		m    *sandbox.Manager
		opts sandbox.CreateOptions
	}
	sides := []side{{"none", plain, sandbox.CreateOptions{Network: sandbox.NetworkOptions{Mode: sandbox.NetworkNone}}},
		{"egress", m, sandbox.CreateOptions{Network: sandbox.NetworkOptions{Mode: sandbox.NetworkEgress}}}}
	res := map[string][3]time.Duration{}
	b.ResetTimer()
	for round := range 2 { // interleaved: the two sides see the same machine
		for _, s := range sides {
			hh := &harness{dir: h.dir, reg: h.reg, be: h.be, m: s.m}
			var src sandbox.SandboxRecord
			create := measure(reps, func() {
				r, err := s.m.Create(ctx, s.opts)
				if err != nil {
					b.Fatal(err)
				}
				if src.ID == "" {
					src = r
				} else {
					_ = s.m.Remove(ctx, r.ID)
				}
			})
			cp, err := s.m.Checkpoint(ctx, src.ID, "")
			if err != nil {
				b.Fatal(err)
			}
			fork := measure(max(2, reps/2), func() { hh.forkAndAnswer(b, src.ID, cp.ID, 11) })
			rollback := measure(reps, func() {
				if _, err := s.m.Rollback(ctx, src.ID, cp.ID); err != nil {
					b.Fatal(err)
				}
				hh.sh(b, src.ID, "true")
			})
			if round == 1 { // the second round: the first warms caches
				res[s.name] = [3]time.Duration{create, fork, rollback}
			}
			_ = s.m.Remove(ctx, src.ID)
			_ = s.m.RemoveCheckpoint(ctx, cp.ID)
		}
	}
	b.StopTimer()
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-30s %12s %12s %8s\n", "operation (median)", "no network", "network", "ratio")
	for i, name := range []string{"sandbox create", "fork 11, until all answer", "rollback, until it answers"} {
		off, on := res["none"][i], res["egress"][i]
		fmt.Fprintf(&sb, "%-30s %12s %12s %7.2fx\n", name, off.Round(time.Millisecond), on.Round(time.Millisecond),
			float64(on)/float64(off))
		b.ReportMetric(float64(on)/float64(off), []string{"create", "fork11", "rollback"}[i]+"-net-ratio")
	}
	fmt.Print(sb.String())
}
