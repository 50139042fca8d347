package function

import (
	"context"
	"errors"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/metrics"
)

// outcome names how a request ended for zygo_function_requests_total (metrics.Outcomes):
// "ok", its failure when it ran, else the category of the error that kept it from running.
func outcome(inv *Invocation, err error) string {
	switch {
	case err == nil && inv != nil && inv.Failure == agentproc.FailNone:
		return "ok"
	case err == nil && inv != nil:
		return string(inv.Failure)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errdefs.IsUnavailable(err):
		return "unavailable"
	case errors.Is(err, errdefs.ErrTooLarge):
		return "too_large"
	case errors.Is(err, errdefs.ErrInvalidArgument):
		return "bad_request"
	}
	return "error"
}

// MetricSamples returns what a scrape of /metrics reads of each loaded function (in flight,
// waiting for a slot, idle pool, the zygote's host pid), sorted by name. It takes each
// deployment's lock briefly, as List does.
func (m *Manager) MetricSamples() []metrics.FunctionSample {
	st := m.List()
	out := make([]metrics.FunctionSample, 0, len(st))
	for _, s := range st {
		d := m.get(s.Name)
		if d == nil {
			continue // removed since List
		}
		out = append(out, metrics.FunctionSample{Name: s.Name, InFlight: s.InFlight, Waiting: int(d.queued.Load()),
			PoolIdle: s.IdleWorkers + s.idleChildren, ZygoteHostPID: s.ZygotePID})
	}
	return out
}
