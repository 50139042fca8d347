package function

import (
	"context"
	"fmt"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/cgroup"
)

// Limiter places a request's child in a cgroup of its own. *cgroup.Manager
// implements it.
type Limiter interface {
	Place(ctx context.Context, name string, hostPID int, l cgroup.Limits) (*cgroup.Group, error)
	// PlacePooled is Place into an empty group kept for prefix and l, made
	// when none is; the group is given back with Group.Release.
	PlacePooled(ctx context.Context, prefix string, hostPID int, l cgroup.Limits) (*cgroup.Group, error)
	// DropPooled deletes the groups kept for prefix (a removed function's).
	DropPooled(prefix string) error
}

// sandboxGroup is a sandbox's *cgroup.Group as a agentproc.Cgroup.
type sandboxGroup struct{ *cgroup.Group }

// Exceeded names the manifest key of the limit the group hit.
func (g sandboxGroup) Exceeded() (limit, value string) {
	limit, value = g.Group.Exceeded()
	switch limit {
	case "memory":
		limit = "zygote_memory_mib"
	case "pids":
		limit = "zygote_pids"
	}
	return limit, value
}

// limitPoll is how often a request's CPU time and pids counter are read,
// so a request may run up to this long past cpu_ms.
const limitPoll = 20 * time.Millisecond

// placeInCgroup moves the child into d's per-request cgroup, whose Enforce
// watches its CPU time and pids counter; going over either kills the whole
// group. The
// returned after() reclassifies a death caused by a limit and releases the
// group: kept for the next request when the child left it empty and hit no
// limit, else deleted (killing any process the request left behind).
func (m *Manager) placeInCgroup(ctx context.Context, d *deployment, reqID string, hostPID int) (func(*agentproc.Result), error) {
	l := d.manifest.Limits
	g, err := m.limiter.PlacePooled(ctx, d.name, hostPID, cgroup.Limits{MemoryMiB: l.MemoryMiB, PIDs: l.PIDs, CPUMs: l.CPUMs})
	if err != nil {
		return nil, fmt.Errorf("placing the child in its cgroup: %w", err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Enforce(wctx, limitPoll)
	}()
	return func(res *agentproc.Result) {
		stop()
		<-done
		if res.Failure != agentproc.FailNone && res.Failure != agentproc.FailTimeout {
			if limit, value := g.Exceeded(); limit != "" {
				res.Failure = agentproc.FailLimit
				res.Error = &agentproc.HandlerError{Type: "LimitExceeded",
					Message: fmt.Sprintf("%s limit exceeded: %s (the request was killed)", limit, value)}
			}
		}
		// Off the request path, once the zygote has reaped the child (or it
		// was killed and waited for): Release then finds the group empty at
		// its first read instead of polling pids.current through the exit,
		// and keeps it, or deletes it with whatever is left in it
		// (processes the request left behind).
		gone := res.Gone()
		m.goTracked(func() {
			if gone != nil && !m.shuttingDown() { // inline when shut: settle runs before gone
				<-gone
			}
			if err := g.Release(); err != nil {
				m.log.Warn("releasing request cgroup", "function", d.name, "request_id", reqID, "err", err)
			}
		})
	}, nil
}
