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
	// HoldPooled is PlacePooled for a child placed ahead of its request, whose
	// CPU count starts at Group.Begin.
	HoldPooled(ctx context.Context, prefix string, hostPID int, l cgroup.Limits) (*cgroup.Group, error)
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

// placeInCgroup moves the child into d's per-request cgroup and starts
// enforcing its limits there (enforceIn).
func (m *Manager) placeInCgroup(ctx context.Context, d *deployment, reqID string, hostPID int) (func(*agentproc.Result), error) {
	g, err := m.limiter.PlacePooled(ctx, d.name, hostPID, requestLimits(d))
	if err != nil {
		return nil, fmt.Errorf("placing the child in its cgroup: %w", err)
	}
	return m.enforceIn(d, reqID, g), nil
}

func requestLimits(d *deployment) cgroup.Limits {
	l := d.manifest.Limits
	return cgroup.Limits{MemoryMiB: l.MemoryMiB, PIDs: l.PIDs, CPUMs: l.CPUMs}
}

// enforceIn watches g, the request's cgroup, with Enforce: CPU time over
// cpu_ms or a fork refused by the pids limit kills the whole group. The
// returned after() reclassifies a death caused by a limit and releases the
// group: kept for the next request when the child left it empty and hit no
// limit, else deleted (killing any process the request left behind).
func (m *Manager) enforceIn(d *deployment, reqID string, g *cgroup.Group) func(*agentproc.Result) {
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	if l := g.Limits(); l.CPUMs > 0 || l.PIDs > 0 { // else nothing to watch: no goroutine
		go func() {
			defer close(done)
			g.Enforce(wctx, limitPoll)
		}()
	} else {
		close(done)
	}
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
		// (processes the request left behind). It runs on the goroutine
		// that releases the request (Result.OnGone), not one of its own.
		m.releaseWhenGone(d, reqID, g, res)
	}
}

// releaseWhenGone releases g (Group.Release) once res's process is gone
// (Result.OnGone), counted as a goroutine of the Manager's until then; at
// once while the manager shuts down.
func (m *Manager) releaseWhenGone(d *deployment, reqID string, g *cgroup.Group, res *agentproc.Result) {
	release := func() {
		if err := g.Release(); err != nil {
			m.log.Warn("releasing request cgroup", "function", d.name, "request_id", reqID, "err", err)
		}
	}
	m.wgMu.Lock()
	if m.shut {
		m.wgMu.Unlock()
		release()
		return
	}
	m.wg.Add(1)
	m.wgMu.Unlock()
	res.OnGone(func() {
		done, err := g.TryRelease()
		if !done {
			// Processes left behind: Release waits for them up to 200 ms, then kills
			// them; not on the zygote's reader, which runs OnGone.
			go func() {
				defer m.wg.Done()
				release()
			}()
			return
		}
		defer m.wg.Done()
		if err != nil {
			m.log.Warn("releasing request cgroup", "function", d.name, "request_id", reqID, "err", err)
		}
	})
}

// releaseGroup releases g (Group.Release) in the background once gone is
// closed (nil: at once; inline while the manager shuts down).
func (m *Manager) releaseGroup(d *deployment, reqID string, g *cgroup.Group, gone <-chan struct{}) {
	m.goTracked(func() {
		if gone != nil && !m.shuttingDown() { // inline when shut: settle runs before gone
			<-gone
		}
		if err := g.Release(); err != nil {
			m.log.Warn("releasing request cgroup", "function", d.name, "request_id", reqID, "err", err)
		}
	})
}

// holdInCgroup is RunnerOptions.Hold of d's runtimes: a pre-forked child
// (or a ready Node worker) is moved into a request cgroup of its own when it
// joins the pool, off the request path, because on cgroup v1 moving a
// process after a quiet spell waits 8-16 ms for the kernel (an RCU grace
// period on the cgroup migration lock), which at GO was most of a paced
// request's time before GO.
//
// The idle child is charged to that group from then on. It is blocked
// reading its request socket (a Python child) or its control channel (a
// Node worker's event loop), so it forks nothing and allocates (almost)
// nothing; pages it touched before, in its pre-warm or a worker's import,
// stay charged to the sandbox's own group (cgroup v1 and v2 do not move a
// charge with the process). At GO, Begin restarts the group's CPU count
// (Group.Begin) so cpu_ms counts from GO, and Enforce starts watching it.
// A child that never serves a request gives its group back with Release.
func (m *Manager) holdInCgroup(d *deployment) func(context.Context, int) (agentproc.Held, error) {
	return func(ctx context.Context, hostPID int) (agentproc.Held, error) {
		g, err := m.limiter.HoldPooled(ctx, d.name, hostPID, requestLimits(d))
		if err != nil {
			return nil, fmt.Errorf("placing the child in its request cgroup: %w", err)
		}
		return &heldGroup{m: m, d: d, g: g}, nil
	}
}

// heldGroup is an idle child's request cgroup (holdInCgroup).
type heldGroup struct {
	m *Manager
	d *deployment
	g *cgroup.Group
}

// Begin implements agentproc.Held: the CPU count restarts and the limits
// are enforced from now.
func (h *heldGroup) Begin(_ context.Context, requestID string) (func(*agentproc.Result), error) {
	if err := h.g.Begin(); err != nil {
		h.m.releaseGroup(h.d, requestID, h.g, nil) // the child is killed: Release waits for it, then deletes
		return nil, fmt.Errorf("starting the request's cgroup: %w", err)
	}
	return h.m.enforceIn(h.d, requestID, h.g), nil
}

// Drop implements agentproc.Held.
func (h *heldGroup) Drop(gone <-chan struct{}) { h.m.releaseGroup(h.d, "", h.g, gone) }
