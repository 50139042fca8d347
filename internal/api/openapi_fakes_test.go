package api_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/api"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/pool"
	"github.com/zygo-run/zygo/internal/store"
)

// The fakes of the drive test (openapi_drive_test.go) for the pools, the tokens' store and
// the metrics: each answers a full record, or its err.

// specPools is an api.Pools: one pool, "batch", with a shared lane and a tenant's.
type specPools struct {
	err       error // every call's
	upErr     error // Up's, when err is nil
	unchanged bool  // Up finds the same manifest up
	runErr    error // Run's, when err is nil
	putErr    error // PutScript's, when err is nil
	run       pool.RunResult
}

var _ api.Pools = (*specPools)(nil)

func newSpecPools() *specPools {
	return &specPools{run: pool.RunResult{Result: &agentproc.Result{Value: []byte(`{"ok": true}`), Child: agentproc.ChildForked,
		Elapsed: time.Millisecond, Phases: []agentproc.Phase{{Name: "fork", Took: time.Millisecond}}},
		RequestID: "r-2", Hash: "ab12", Lane: "tenant:acme", Mounted: true}}
}

var poolStatus = pool.Status{Name: "batch", Created: t0, Running: 1, Waiting: 2, Tenants: 1, Fallback: "threads at warm-up",
	Manifest: pool.Manifest{Kind: pool.Kind, Name: "batch", Runtime: "python", Preload: []string{"json"}, Isolation: "per-tenant",
		Interpreter: "/usr/bin/python3", Concurrency: 8, Limits: function.Limits{TimeoutMs: 1000, MemoryMiB: 128, PIDs: 10,
			CPUMs: 100, MaxRequestKiB: 6, MaxResponseKiB: 6}, Tenant: pool.TenantLimits{Concurrency: 2, Queue: 4, IdleS: 60}},
	Lanes: []pool.LaneStatus{{Lane: "shared", State: "ready", HostPID: 9, InFlight: 1}, {Lane: "tenant:acme", State: "starting"}}}

func (p *specPools) Up(context.Context, []byte) (pool.UpResult, error) {
	if p.err != nil {
		return pool.UpResult{}, p.err
	}
	if p.upErr != nil {
		return pool.UpResult{}, p.upErr
	}
	return pool.UpResult{Name: "batch", Unchanged: p.unchanged, Warmup: function.Warmup{Fallback: "threads at warm-up",
		Ready: agentproc.Ready{Checks: []agentproc.Check{{Name: "threads", Level: "warn", Detail: "2"}}}}}, nil
}

func (p *specPools) List() []pool.Status { return []pool.Status{poolStatus} }

func (p *specPools) Get(name string) (pool.Status, error) {
	if p.err != nil {
		return pool.Status{}, p.err
	}
	if name != poolStatus.Name {
		return pool.Status{}, fmt.Errorf("pool %q: %w", name, errdefs.ErrNotFound)
	}
	return poolStatus, nil
}

func (p *specPools) Remove(context.Context, string) error { return p.err }

func (p *specPools) PutScript(_, _ string, s pool.Script) (string, error) {
	if p.err != nil {
		return "", p.err
	}
	return s.Hash(), p.putErr
}

func (p *specPools) Run(context.Context, string, pool.RunRequest) (*pool.RunResult, error) {
	if p.err != nil {
		return nil, p.err
	}
	if p.runErr != nil {
		return nil, p.runErr
	}
	res := p.run
	return &res, nil
}

// specTokenStore is an api.TokenStore holding toks.
type specTokenStore struct {
	err  error // every call's but TouchToken's
	toks []store.Token
}

var _ api.TokenStore = (*specTokenStore)(nil)

func (s *specTokenStore) PutToken(_ context.Context, t store.Token) error {
	if s.err != nil {
		return s.err
	}
	if slices.ContainsFunc(s.toks, func(o store.Token) bool { return o.Name == t.Name }) {
		return fmt.Errorf("token %q: %w", t.Name, errdefs.ErrExists)
	}
	s.toks = append(s.toks, t)
	return nil
}

func (s *specTokenStore) SetToken(_ context.Context, t store.Token) error {
	s.toks = append(s.toks, t)
	return s.err
}

func (s *specTokenStore) Tokens(context.Context) ([]store.Token, error) { return s.toks, s.err }

func (s *specTokenStore) DeleteToken(_ context.Context, name string) error {
	if s.err != nil {
		return s.err
	}
	i := slices.IndexFunc(s.toks, func(t store.Token) bool { return t.Name == name })
	if i < 0 {
		return fmt.Errorf("token %q: %w", name, errdefs.ErrNotFound)
	}
	s.toks = slices.Delete(s.toks, i, i+1)
	return nil
}

func (s *specTokenStore) TouchToken(context.Context, string, time.Time) error { return nil }

// failingCollector is a Prometheus collector whose every collection fails.
type failingCollector struct{ desc *prometheus.Desc }

func newFailingCollector() failingCollector {
	return failingCollector{prometheus.NewDesc("zygo_broken", "a collector that fails", nil, nil)}
}

func (c failingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c failingCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(c.desc, fmt.Errorf("reading the cgroup: %w", errdefs.ErrUnavailable))
}
