package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// Pooled groups: making a v1 group is a mkdir, a limit write and a move in each of four
// hierarchies, and deleting one is a freeze, a walk of cgroup.procs, a thaw and an rmdir in
// each; for a request of a few milliseconds that is most of the daemon's work. A request
// whose process exited and left nothing behind leaves its group empty, and an empty group
// needs no kill: Release resets its counters and keeps it for the next request with the
// same prefix and limits. Anything else — a process still in the group after releaseWait,
// a limit that was hit — is deleted as before (Delete's kill walk).
//
// Counters the kernel lets root reset are reset on reuse, each only when it can hold
// something: v1 memory.max_usage_in_bytes at Release; v1 cpuacct.usage when the group is
// taken again (PlacePooled, before the move), or for a held child at its request's Begin
// (HoldPooled: one write a child, where Release and Begin each wrote one). memory.failcnt
// and memory.memsw.failcnt are 0 in any kept group (a fail count makes MemoryLimitHit,
// which deletes it), and memory.memsw.max_usage_in_bytes is read by nothing: none is
// written. The counters that cannot be reset (pids.events, memory.oom_control's oom_kill,
// every v2 counter) are read once at reuse and subtracted (Group.base), so Usage and
// Exceeded of a reused group count only its current request. The v2 memory.peak cannot be
// reset: a group is reused only when its peak stayed below the limit, so a reused group's
// MemoryLimitHit is still its own request's.

const (
	// releaseWait bounds how long Release waits for the group to empty: the child writes
	// its result and exits, so it is usually gone within a millisecond.
	releaseWait = 200 * time.Millisecond
	// maxFree bounds the empty groups kept over all prefixes; more are deleted.
	maxFree = 256
	// keepMaxChargeBytes is the most memory an empty group may still be charged with and
	// be kept. A request's process is gone, but pages it made that outlive it (a file it
	// left on the zygote's tmpfs /tmp or /dev/shm, page cache) stay charged to the group
	// that first touched them; kept, they would count against the next request's
	// memory_mib. Deleted, the kernel moves the charge to the parent.
	keepMaxChargeBytes = 2 << 20
)

// poolKey is what makes two groups interchangeable.
type poolKey struct {
	prefix string
	limits Limits
}

// counters are a group's monotonic counters that cannot be reset, subtracted on reuse.
type counters struct {
	cpu               time.Duration // v2 only (v1 resets cpuacct.usage)
	memFail, oomKills uint64
	pidsMax           uint64
}

// PlacePooled is Place for a group of its own under prefix ("fn"), taken from the empty
// groups Release kept for prefix and l when there is one, else made (named
// "<prefix>/p<N>"). Its CPU count starts at the placement. Release it, not Delete it,
// when the request is over. Errors are Place's.
func (m *Manager) PlacePooled(ctx context.Context, prefix string, hostPID int, l Limits) (*Group, error) {
	return m.placePooled(ctx, prefix, hostPID, l, false)
}

// HoldPooled is PlacePooled for a process placed ahead of its request (a pre-forked child
// that waits for it in the group): its CPU count starts at Begin, which the request calls
// before Enforce, Usage or Exceeded. A reused v1 group's cpuacct.usage is then written
// once, by Begin, not also when it is taken. A held group given back without a request
// (Release without Begin) is judged by its memory and pids counters alone. Errors are
// Place's.
func (m *Manager) HoldPooled(ctx context.Context, prefix string, hostPID int, l Limits) (*Group, error) {
	return m.placePooled(ctx, prefix, hostPID, l, true)
}

func (m *Manager) placePooled(ctx context.Context, prefix string, hostPID int, l Limits, hold bool) (*Group, error) {
	if err := checkName(prefix); err != nil {
		return nil, err
	}
	if err := l.validate(); err != nil {
		return nil, err
	}
	key := poolKey{prefix, l}
	for {
		m.mu.Lock()
		free := m.free[key]
		if len(free) == 0 {
			m.seq++
			name, gen := prefix+"/p"+strconv.FormatUint(m.seq, 10), m.gens[prefix]
			m.mu.Unlock()
			g, err := m.Place(ctx, name, hostPID, l)
			if g != nil {
				g.pool, g.gen, g.files = &key, gen, &ctlFiles{}
			}
			return g, err
		}
		g := free[len(free)-1]
		m.free[key] = free[:len(free)-1]
		m.nfree--
		m.mu.Unlock()
		if g.cpuStale && !hold {
			// Empty until the move below: the count restarts at the placement.
			if err := g.writeZeroFile(ctrlCPU, "cpuacct.usage"); err != nil {
				_ = g.Delete() // a broken or vanished group: the next one, or a new one
				continue
			}
			g.cpuStale = false
		}
		err := g.Add(hostPID)
		if err == nil {
			return g, nil
		}
		// The pid is gone (it cannot be placed anywhere), or the group is: drop the group,
		// and try no further when it is the process that is missing.
		_ = g.Delete()
		if errors.Is(err, errdefs.ErrNotFound) && !dirExists(g.dir(ctrlPids)) {
			continue
		}
		return nil, err
	}
}

// Empty reports whether g holds no process now (one read of pids.current; an error reads
// as false): Release then keeps or deletes it without waiting. A caller that must not wait
// up to releaseWait (and a Delete's kill walk) releases a group that is not empty
// elsewhere.
func (g *Group) Empty() bool {
	n, err := g.readUintFile(ctrlPids, "pids.current")
	return err == nil && n == 0
}

// Release ends a request's use of a group from PlacePooled: once the group is empty
// (waiting up to releaseWait for its process to finish exiting) and no limit was hit, it
// is reset and kept for the next request; otherwise it is deleted (Delete: the kill
// walk). A group from Place is deleted. The Group must not be used after Release.
func (g *Group) Release() error {
	if g.pool == nil || !g.waitNoPIDs(releaseWait) {
		return g.Delete()
	}
	return g.releaseEmpty()
}

// TryRelease is Release for a caller that must not wait: when g holds no process now (one
// read of pids.current; an error reads as not empty) it releases g as Release does and
// returns true with Release's error; otherwise it returns false and leaves g as it was,
// for the caller to Release where waiting (and a kill walk) is allowed.
func (g *Group) TryRelease() (bool, error) {
	if !g.Empty() {
		return false, nil
	}
	if g.pool == nil {
		return true, g.Delete()
	}
	return true, g.releaseEmpty()
}

// releaseEmpty is Release of a pooled group found empty: kept when no limit was hit and
// little memory is still charged to it, else deleted. It reads only what that decision
// and the reset need (six reads on v1 with memsw: not pids.current, known to be 0, nor
// cpuacct.usage without a cpu_ms limit or while it still holds earlier requests' time).
func (g *Group) releaseEmpty() error {
	cpuKnown := g.m.v2 || g.limits.CPUMs > 0 && !g.cpuStale
	r, err := g.readRaw(cpuKnown, false)
	if err != nil {
		return g.Delete()
	}
	if u := g.usageOf(r); u.OOMKills > 0 || u.PIDsLimitHit || u.MemoryLimitHit ||
		cpuKnown && g.limits.CPUMs > 0 && u.CPU > time.Duration(g.limits.CPUMs)*time.Millisecond {
		return g.Delete()
	}
	if charged, err := g.memoryCharge(); err != nil || charged > keepMaxChargeBytes {
		return g.Delete()
	}
	next, err := g.reset(r)
	if err != nil {
		return errors.Join(err, g.Delete())
	}
	m := g.m
	m.mu.Lock()
	if m.nfree >= maxFree || m.gens[g.pool.prefix] != g.gen {
		m.mu.Unlock()
		return g.Delete()
	}
	if m.free == nil {
		m.free = map[poolKey][]*Group{}
	}
	m.free[*g.pool] = append(m.free[*g.pool], next)
	m.nfree++
	m.mu.Unlock()
	return nil
}

// Begin starts the request of a group placed ahead of it (a child that waited for its
// request in the group, blocked): its CPU time counts from now. v1 resets cpuacct.usage; v2
// records the current usage_usec as the base Usage subtracts. The memory and pids counters
// are left as they are: the waiting process forks nothing and allocates (almost) nothing,
// and what it allocates counts against the request's memory limit. Call it once, before
// Enforce, Usage or Exceeded. Errors: reading or writing the counter (a deleted group:
// errdefs.ErrNotFound).
func (g *Group) Begin() error {
	if !g.m.v2 {
		err := g.writeZeroFile(ctrlCPU, "cpuacct.usage")
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
		}
		if err != nil {
			return fmt.Errorf("restarting the CPU count of cgroup %s: %w", g.rel, err)
		}
		g.cpuStale = false
		return nil
	}
	cpu, err := g.cpu()
	if errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
	}
	if err != nil {
		return fmt.Errorf("restarting the CPU count of cgroup %s: %w", g.rel, err)
	}
	g.base.cpu = cpu
	return nil
}

// memoryCharge returns the bytes of memory still charged to g (v1 memory.usage_in_bytes,
// v2 memory.current).
func (g *Group) memoryCharge() (uint64, error) {
	file := "memory.usage_in_bytes"
	if g.m.v2 {
		file = "memory.current"
	}
	return g.readUintFile(ctrlMemory, file)
}

// waitNoPIDs polls pids.current until it is 0 (true) or d passes (false).
func (g *Group) waitNoPIDs(d time.Duration) bool {
	for deadline := time.Now().Add(d); ; {
		n, err := g.readUintFile(ctrlPids, "pids.current")
		if err != nil {
			return false
		}
		if n == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// reset returns a fresh Group for g's empty directories, which takes over g's open
// control files, with its counters reset or recorded as its base (see the comment at the
// top of this file). r is what g's counters read once the group was empty: nothing in it
// can change them since. On v1 it writes one file, memory.max_usage_in_bytes (the peak);
// cpuacct.usage is left to the group's next taker (cpuStale).
func (g *Group) reset(r rawCounters) (*Group, error) {
	next := &Group{m: g.m, rel: g.rel, limits: g.limits, pool: g.pool, gen: g.gen, files: g.files}
	next.base.oomKills, next.base.pidsMax = r.oomKills, r.pidsMax
	if g.m.v2 {
		next.base.cpu, next.base.memFail = r.cpu, r.memFail
		return next, nil
	}
	if err := g.writeZeroFile(ctrlMemory, "memory.max_usage_in_bytes"); err != nil {
		return nil, fmt.Errorf("resetting cgroup %s for reuse: %w", g.rel, err)
	}
	next.cpuStale = true
	return next, nil
}

// DropPooled deletes the empty groups kept under prefix (a function that is removed), and
// makes Release delete, not keep, the groups of prefix placed before it. Errors are
// Delete's, joined.
func (m *Manager) DropPooled(prefix string) error {
	m.mu.Lock()
	if m.gens == nil {
		m.gens = map[string]uint64{}
	}
	m.gens[prefix]++
	var drop []*Group
	for k, free := range m.free {
		if k.prefix == prefix {
			drop = append(drop, free...)
			m.nfree -= len(free)
			delete(m.free, k)
		}
	}
	m.mu.Unlock()
	var errs []error
	for _, g := range drop {
		errs = append(errs, g.Delete())
	}
	return errors.Join(errs...)
}
