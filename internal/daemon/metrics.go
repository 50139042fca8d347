package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/metrics"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// sandboxStates are the states zygo_sandboxes exports (at 0 when none is in them).
var sandboxStates = []sandbox.State{sandbox.Creating, sandbox.Restoring, sandbox.Resealing, sandbox.Running,
	sandbox.Checkpointing, sandbox.RollingBack, sandbox.Paused, sandbox.Resuming, sandbox.Dead, sandbox.Failed, sandbox.Removing, sandbox.Recovering}

// watchFunctions makes the function gauges of reg read mgr at scrape time.
func watchFunctions(reg *metrics.Registry, mgr *function.Manager) {
	reg.WatchFunctions(mgr.MetricSamples)
}

// watchSandboxes makes zygo_sandboxes of reg count mgr's sandboxes by state at scrape time.
func watchSandboxes(reg *metrics.Registry, mgr *sandbox.Manager) {
	states := make([]string, len(sandboxStates))
	for i, s := range sandboxStates {
		states[i] = string(s)
	}
	reg.WatchSandboxes(states, func(ctx context.Context) ([]metrics.SandboxCount, error) {
		recs, err := mgr.List(ctx)
		if err != nil {
			return nil, err
		}
		by := map[sandbox.State]int{}
		for _, r := range recs {
			by[r.State]++
		}
		out := make([]metrics.SandboxCount, 0, len(by))
		for s, n := range by {
			out = append(out, metrics.SandboxCount{State: string(s), Count: n})
		}
		return out, nil
	})
}

// meteredSandboxes is the sandbox Manager as the API sees it, with the duration of every
// create, checkpoint, fork and rollback, and their failures, recorded in reg.
type meteredSandboxes struct {
	*sandbox.Manager
	reg *metrics.Registry
}

func (s meteredSandboxes) Create(ctx context.Context, opts sandbox.CreateOptions) (sandbox.SandboxRecord, error) {
	t0 := time.Now()
	rec, err := s.Manager.Create(ctx, opts)
	s.record("create", t0, err)
	return rec, err
}

func (s meteredSandboxes) Checkpoint(ctx context.Context, id, tag string) (sandbox.CheckpointRecord, error) {
	t0 := time.Now()
	cp, err := s.Manager.Checkpoint(ctx, id, tag)
	s.record("checkpoint", t0, err)
	return cp, err
}

// Fork records one failure per child that failed (and one for a fork that failed before any
// child), and its duration when a child is running.
func (s meteredSandboxes) Fork(ctx context.Context, id string, opts sandbox.ForkOptions) (sandbox.ForkResult, error) {
	t0 := time.Now()
	res, err := s.Manager.Fork(ctx, id, opts)
	failed := 0
	for _, c := range res.Children {
		if c.Err != nil && operational(c.Err) {
			s.reg.SandboxOperation("fork", 0, c.Err)
			failed++
		}
	}
	if err == nil || failed == 0 {
		s.record("fork", t0, err)
	}
	return res, err
}

func (s meteredSandboxes) Rollback(ctx context.Context, id, checkpoint string) (sandbox.SandboxRecord, error) {
	t0 := time.Now()
	rec, err := s.Manager.Rollback(ctx, id, checkpoint)
	s.record("rollback", t0, err)
	return rec, err
}

// record records op's duration, or its failure when err is operational; a call refused for
// its input or the sandbox's state (400, 404, 409) or given up by its caller is neither.
func (s meteredSandboxes) record(op string, t0 time.Time, err error) {
	if err != nil && !operational(err) {
		return
	}
	s.reg.SandboxOperation(op, time.Since(t0), err)
}

// operational reports whether err is a failure of the operation itself, not a refusal of
// its input or state nor the caller's cancellation.
func operational(err error) bool {
	return !errdefs.IsInvalidArgument(err) && !errdefs.IsNotFound(err) && !errdefs.IsFailedPrecondition(err) &&
		!errdefs.IsExists(err) && !errors.Is(err, context.Canceled)
}

// meteredReseal returns reseal with its duration and failures recorded in reg.
func meteredReseal(reg *metrics.Registry, reseal sandbox.ResealFunc) sandbox.ResealFunc {
	return func(ctx context.Context, t sandbox.ResealTarget) (guest.ResealResult, error) {
		t0 := time.Now()
		res, err := reseal(ctx, t)
		reg.SandboxOperation("reseal", time.Since(t0), err)
		return res, err
	}
}
