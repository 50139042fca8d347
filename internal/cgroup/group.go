package cgroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/errdefs"
)

const (
	// killTimeout bounds Kill: how long it keeps signalling before giving up on processes
	// that will not leave the group (stuck in the kernel, uninterruptible).
	killTimeout = 5 * time.Second
	// killRound is how long one round of Kill waits for the group to empty before it
	// signals again (new pids that slipped in without a freezer).
	killRound = 200 * time.Millisecond
	// freezeTimeout bounds waiting for a freezer to report the group frozen; Kill goes on
	// unfrozen after it.
	freezeTimeout = 250 * time.Millisecond
	// removeTimeout bounds retrying rmdir on EBUSY, which the kernel returns for a moment
	// after the last process left.
	removeTimeout = 2 * time.Second
	// DefaultPoll is Enforce's interval when given none.
	DefaultPoll = 50 * time.Millisecond
)

// Group is one request's cgroup, made by Manager.Place. Its methods are safe for
// concurrent use; Kill and Delete run one at a time.
type Group struct {
	m      *Manager
	rel    string    // group path inside every hierarchy, e.g. "/zygo/fn/req"
	limits Limits    // zero for groups found by Cleanup
	pool   *poolKey  // set for a group of PlacePooled: Release may keep it
	gen    uint64    // Manager.gens[pool.prefix] when placed: a later DropPooled makes Release delete it
	base   counters  // counters at the group's reuse, subtracted by readUsage (pool.go)
	files  *ctlFiles // control files kept open (files.go); nil: opened at each use
	// cpuStale: v1 cpuacct.usage still holds earlier requests' time (a kept group not yet
	// taken again, or held by HoldPooled until Begin); set and cleared by its one user.
	cpuStale bool

	opMu sync.Mutex // serializes Kill and Delete

	mu      sync.Mutex // guards deleted and final
	deleted bool
	final   *Usage // counters read just before Delete removed the directories; nil if unreadable
}

// Usage is what a group's processes used, summed over every process that ever ran in it.
type Usage struct {
	CPU             time.Duration // user+system CPU time (v1 cpuacct.usage, v2 cpu.stat usage_usec)
	MemoryPeakBytes uint64        // memory high-water mark in bytes; 0 on v2 kernels without memory.peak (< 5.19)
	// MemoryFailCount counts charges that hit the limit (v1 memory.failcnt plus
	// memory.memsw.failcnt, v2 memory.events "max"). Reclaim often succeeds after one, so
	// it is not a kill. Recent v1 kernels (seen on 6.18) never count memsw failures, and
	// as memsw is charged first and has the same limit, memory.failcnt stays 0 too: on
	// them only OOMKills and the peak show the limit was reached.
	MemoryFailCount uint64
	OOMKills        uint64 // processes the OOM killer killed in the group (v1 memory.oom_control, v2 memory.events "oom_kill")
	// MemoryLimitHit: memory reached the limit at least once (a fail count, an OOM kill, or a
	// peak at the limit). A process can survive it; OOMKills > 0 is what kills.
	MemoryLimitHit bool
	PIDs           uint64 // processes and threads in the group now (pids.current)
	PIDsLimitHit   bool   // a fork or clone was refused by the pids limit (pids.events "max" > 0)
}

// Path is the group's path inside each hierarchy, such as "/zygo/fn/req".
func (g *Group) Path() string { return g.rel }

// Limits returns the limits the group was placed with.
func (g *Group) Limits() Limits { return g.limits }

// dir is the group's directory in the hierarchy of ctrl, or "" if that controller is absent.
func (g *Group) dir(ctrl string) string {
	root, ok := g.m.roots[ctrl]
	if !ok {
		return ""
	}
	return filepath.Join(root, g.rel)
}

// dirs is the group's directory in every hierarchy used, each once.
func (g *Group) dirs() []string {
	var out []string
	for _, root := range g.m.roots {
		d := filepath.Join(root, g.rel)
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

// Add moves one more process (a host pid; its threads move with it) into the group, in
// every hierarchy. Like Place it moves only that process: its existing children stay
// where they are. Errors wrap errdefs.ErrNotFound when the process or the group is gone,
// errdefs.ErrInvalidArgument for a pid <= 0.
func (g *Group) Add(hostPID int) error {
	if hostPID <= 0 {
		return fmt.Errorf("adding pid %d to cgroup %s: %w", hostPID, g.rel, errdefs.ErrInvalidArgument)
	}
	pid := strconv.AppendInt(nil, int64(hostPID), 10)
	for _, ctrl := range g.m.hierarchies() {
		err := g.write(ctlFile{ctrl: ctrl, name: "cgroup.procs"}, pid)
		if errors.Is(err, unix.ESRCH) || errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
		}
		if err != nil {
			return fmt.Errorf("adding pid %d to cgroup %s: %w", hostPID, g.rel, err)
		}
	}
	return nil
}

// hierarchies names one controller of each hierarchy used (v2: one; v1: memory, pids,
// cpuacct and freezer, less those mounted together), in a fixed order.
func (m *Manager) hierarchies() []string {
	m.hierOnce.Do(func() {
		ctrls := make([]string, 0, len(m.roots))
		for c := range m.roots {
			ctrls = append(ctrls, c)
		}
		slices.Sort(ctrls)
		var roots []string
		for _, c := range ctrls {
			if !slices.Contains(roots, m.roots[c]) {
				roots = append(roots, m.roots[c])
				m.hier = append(m.hier, c)
			}
		}
	})
	return m.hier
}

// Usage reads the group's counters. After Delete it returns the counters read just before
// the directories went. Errors wrap errdefs.ErrNotFound when the group is gone.
func (g *Group) Usage() (Usage, error) {
	g.mu.Lock()
	deleted, final := g.deleted, g.final
	g.mu.Unlock()
	if deleted {
		if final == nil {
			return Usage{}, fmt.Errorf("reading usage of cgroup %s: deleted: %w", g.rel, errdefs.ErrNotFound)
		}
		return *final, nil
	}
	return g.readUsage()
}

// rawCounters are a group's counters as the kernel reports them, before the base of a
// reused group is subtracted (pool.go).
type rawCounters struct {
	cpu                              time.Duration
	peak, memFail, oomKills, pidsMax uint64
	pids                             uint64
}

func (g *Group) readUsage() (Usage, error) {
	r, err := g.readRaw(true, true)
	if err != nil {
		return Usage{}, err
	}
	return g.usageOf(r), nil
}

// readRaw reads the counters Usage reports: seven reads on v1 with memsw (one of each
// file); the CPU time and pids.current only when cpu and pids say so (left 0 otherwise).
func (g *Group) readRaw(cpu, pids bool) (r rawCounters, err error) {
	defer func() {
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
		}
		if err != nil {
			err = fmt.Errorf("reading usage of cgroup %s: %w", g.rel, err)
		}
	}()
	if cpu {
		if r.cpu, err = g.cpu(); err != nil {
			return r, err
		}
	}
	if g.m.v2 {
		err = g.readMemoryV2(&r)
	} else {
		err = g.readMemoryV1(&r)
	}
	if err != nil {
		return r, err
	}
	if r.pidsMax, err = g.readCounter(ctrlPids, "pids.events", "max"); err != nil || !pids {
		return r, err
	}
	r.pids, err = g.readUintFile(ctrlPids, "pids.current")
	return r, err
}

// usageOf is Usage from raw counters, the base subtracted.
func (g *Group) usageOf(r rawCounters) Usage {
	u := Usage{CPU: r.cpu - g.base.cpu, MemoryPeakBytes: r.peak, PIDs: r.pids,
		MemoryFailCount: r.memFail - min(g.base.memFail, r.memFail),
		OOMKills:        r.oomKills - min(g.base.oomKills, r.oomKills),
		PIDsLimitHit:    r.pidsMax > g.base.pidsMax}
	if l := g.limits.memoryBytes(); l > 0 && u.MemoryPeakBytes >= uint64(l) {
		u.MemoryLimitHit = true
	}
	if u.MemoryFailCount > 0 || u.OOMKills > 0 {
		u.MemoryLimitHit = true
	}
	return u
}

// cpu reads the group's CPU time (the kernel's count: the base is not subtracted).
func (g *Group) cpu() (time.Duration, error) {
	if g.m.v2 {
		us, err := g.readCounter(ctrlCPU, "cpu.stat", "usage_usec")
		return time.Duration(us) * time.Microsecond, err
	}
	ns, err := g.readUintFile(ctrlCPU, "cpuacct.usage")
	return time.Duration(ns), err
}

func (g *Group) readMemoryV1(r *rawCounters) error {
	var err error
	if r.peak, err = g.readUintFile(ctrlMemory, "memory.max_usage_in_bytes"); err != nil {
		return err
	}
	if r.memFail, err = g.readUintFile(ctrlMemory, "memory.failcnt"); err != nil {
		return err
	}
	if g.m.memsw {
		n, err := g.readUintFile(ctrlMemory, "memory.memsw.failcnt")
		if err != nil {
			return err
		}
		r.memFail += n
	}
	r.oomKills, err = g.readCounter(ctrlMemory, "memory.oom_control", "oom_kill")
	return err
}

func (g *Group) readMemoryV2(r *rawCounters) error {
	ev, err := g.readCounterList(ctrlMemory, "memory.events", "max", "oom_kill")
	if err != nil {
		return err
	}
	r.memFail, r.oomKills = ev[0], ev[1]
	r.peak, err = g.readUintFile(ctrlMemory, "memory.peak")
	if errors.Is(err, fs.ErrNotExist) {
		err = nil // kernel < 5.19
	}
	return err
}

// Exceeded tells why the group's process most likely died, for messages such as
// "memory limit exceeded: 256 MiB": ("memory", "<MemoryMiB> MiB") when the OOM killer
// killed a process in the group, else ("pids", "<PIDs>") when a fork was refused by the
// pids limit, else ("cpu", "<CPUMs> ms") when CPU time passed a CPUMs limit, else ("", "").
// Memory that merely reached the limit (Usage.MemoryLimitHit) does not count: reclaim
// usually succeeds. It reads the counters, so call it before Delete or rely on the copy
// Delete keeps; a read error gives ("", "").
func (g *Group) Exceeded() (limit, value string) {
	u, err := g.Usage()
	if err != nil {
		return "", ""
	}
	switch {
	case u.OOMKills > 0:
		return "memory", fmt.Sprintf("%d MiB", g.limits.MemoryMiB)
	case u.PIDsLimitHit && g.limits.PIDs > 0:
		return "pids", strconv.Itoa(g.limits.PIDs)
	case g.limits.CPUMs > 0 && u.CPU > time.Duration(g.limits.CPUMs)*time.Millisecond:
		return "cpu", fmt.Sprintf("%d ms", g.limits.CPUMs)
	}
	return "", ""
}

// Enforce is the one watcher of the limits the kernel does not stop at: every `every`
// (DefaultPoll if <= 0) it reads the counters it needs and, once CPU time passes the
// group's CPUMs or a fork was refused by its pids limit, kills the group and returns "cpu"
// or "pids" (Exceeded then says the same). Call it once the group's CPU count started (a
// placed process, or Begin): the group's processes cannot use more CPU time than the
// host's online CPUs give them since then, so CPU time is not read before CPUMs / CPUs has
// passed, and a request shorter than that costs no read of it. It blocks; it returns "" at
// once when the group has neither limit, and when ctx ends or a counter cannot be read (the
// group was deleted). The kernel does not stop the process: it may run up to `every` past
// the CPU limit.
func (g *Group) Enforce(ctx context.Context, every time.Duration) string {
	l := g.limits
	if l.CPUMs <= 0 && l.PIDs <= 0 {
		return ""
	}
	if every <= 0 {
		every = DefaultPoll
	}
	cpuLimit := time.Duration(l.CPUMs) * time.Millisecond
	cpuFrom := time.Now().Add(cpuLimit / time.Duration(hostCPUs()))
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			return ""
		case now = <-t.C:
		}
		hit := ""
		if l.CPUMs > 0 && !now.Before(cpuFrom) {
			cpu, err := g.cpu()
			if err != nil {
				return ""
			}
			if cpu-g.base.cpu > cpuLimit {
				hit = "cpu"
			}
		}
		if hit == "" && l.PIDs > 0 {
			refused, err := g.readCounter(ctrlPids, "pids.events", "max")
			if err != nil {
				return ""
			}
			if refused > g.base.pidsMax {
				hit = "pids"
			}
		}
		if hit == "" {
			continue
		}
		_ = g.Kill() // a group that cannot be killed is reported by Delete
		return hit
	}
}

// Kill sends SIGKILL to every process in the group and its subgroups, and repeats until
// cgroup.procs is empty. On v2 it writes cgroup.kill when the kernel has it (5.14+);
// otherwise it freezes the group first (v1 freezer, v2 cgroup.freeze) so that nothing
// forks between reading the pids and signalling them, then thaws it so the signals land.
// It does not reap: dead children of the caller stay zombies until the caller waits.
// Killing an empty or deleted group succeeds. After killTimeout (5 s) with processes
// still in the group it fails with an error wrapping errdefs.ErrUnavailable.
func (g *Group) Kill() error {
	g.opMu.Lock()
	defer g.opMu.Unlock()
	return g.killLocked()
}

func (g *Group) killLocked() error {
	deadline := time.Now().Add(killTimeout)
	for {
		pids, err := g.procs()
		if err != nil {
			return fmt.Errorf("killing cgroup %s: %w", g.rel, err)
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("killing cgroup %s: pids %v still in it after %s: %w",
				g.rel, pids, killTimeout, errdefs.ErrUnavailable)
		}
		if err := g.signalAll(); err != nil {
			return fmt.Errorf("killing cgroup %s: %w", g.rel, err)
		}
		g.waitEmpty(killRound)
	}
}

// signalAll is one round of Kill.
func (g *Group) signalAll() error {
	if g.m.v2 {
		err := os.WriteFile(filepath.Join(g.dir(ctrlMemory), "cgroup.kill"), []byte("1"), 0)
		if err == nil || errors.Is(err, fs.ErrNotExist) && !dirExists(g.dir(ctrlMemory)) {
			return nil
		}
	}
	frozen := g.setFrozen(true)
	pids, err := g.procs()
	for _, pid := range pids {
		// ESRCH: it died meanwhile. Without a freezer its pid may be reused by then;
		// the window is the few microseconds since reading cgroup.procs.
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	if frozen {
		g.setFrozen(false)
	}
	return err
}

// setFrozen freezes or thaws the group. Freezing waits up to freezeTimeout for the kernel
// to report it frozen. It reports whether the state was written (a freezer exists).
func (g *Group) setFrozen(frozen bool) bool {
	var file, value, stateFile string
	var done func(map[string]uint64, string) bool
	switch {
	case g.m.v2:
		dir := g.dir(ctrlMemory)
		file, stateFile, value = filepath.Join(dir, "cgroup.freeze"), filepath.Join(dir, "cgroup.events"), "0"
		if frozen {
			value = "1"
		}
		done = func(ev map[string]uint64, _ string) bool { return ev["frozen"] == 1 }
	case g.dir(ctrlFreezer) != "":
		dir := g.dir(ctrlFreezer)
		file, value = filepath.Join(dir, "freezer.state"), "THAWED"
		if frozen {
			value = "FROZEN"
		}
		done = func(_ map[string]uint64, state string) bool { return state == "FROZEN" }
	default:
		return false
	}
	if err := os.WriteFile(file, []byte(value), 0); err != nil {
		return false
	}
	if !frozen {
		return true
	}
	for deadline := time.Now().Add(freezeTimeout); time.Now().Before(deadline); {
		if g.m.v2 {
			ev, err := ReadCounters(stateFile)
			if err != nil || done(ev, "") {
				return true
			}
		} else {
			b, err := os.ReadFile(file)
			if err != nil || done(nil, strings.TrimSpace(string(b))) {
				return true
			}
			_ = os.WriteFile(file, []byte(value), 0) // v1 retries FREEZING until FROZEN
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// waitEmpty polls until the group has no processes or d passes.
func (g *Group) waitEmpty(d time.Duration) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if pids, err := g.procs(); err != nil || len(pids) == 0 {
			return
		}
	}
}

// procs lists the pids in the group and its subgroups, in every hierarchy. A group that
// does not exist has none.
func (g *Group) procs() ([]int, error) {
	var pids []int
	for _, dir := range g.dirs() {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // removed meanwhile
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
					pids = append(pids, pid)
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("listing processes: %w", err)
		}
	}
	slices.Sort(pids)
	return pids, nil
}

// Delete kills the group's processes (see Kill), keeps a last copy of its counters for
// Usage and Exceeded, and removes its directories in every hierarchy, with its subgroups,
// and the shared intermediate levels ("fn") left empty. Deleting again, or deleting a group
// already gone, succeeds. Errors come from Kill, or from rmdir still failing after
// removeTimeout (2 s).
func (g *Group) Delete() error {
	g.opMu.Lock()
	defer g.opMu.Unlock()
	g.mu.Lock()
	deleted := g.deleted
	g.mu.Unlock()
	if deleted {
		return nil
	}
	if err := g.killLocked(); err != nil {
		return fmt.Errorf("deleting cgroup %s: %w", g.rel, err)
	}
	var final *Usage
	if u, err := g.readUsage(); err == nil {
		final = &u
	}
	g.closeFiles()
	g.m.mu.Lock()
	err := g.m.removeDirsLocked(g.rel)
	g.m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("deleting cgroup %s: %w", g.rel, err)
	}
	g.mu.Lock()
	g.deleted, g.final = true, final
	g.mu.Unlock()
	return nil
}

// removeDirsLocked removes the group at rel (with its subgroups) in every hierarchy, then
// each empty level between it and the parent. A missing directory counts as removed.
func (m *Manager) removeDirsLocked(rel string) error {
	var errs []error
	for _, root := range uniqueRoots(m.roots) {
		dir := filepath.Join(root, rel)
		var tree []string
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				tree = append(tree, p)
			}
			return nil
		})
		for _, d := range slices.Backward(tree) {
			if err := rmdir(d); err != nil {
				errs = append(errs, err)
			}
		}
		for p := path.Dir(rel); strings.HasPrefix(p, m.parent+"/"); p = path.Dir(p) {
			if unix.Rmdir(filepath.Join(root, p)) != nil {
				break // not empty (another request of the function) or gone
			}
		}
	}
	return errors.Join(errs...)
}

// rmdir removes one cgroup directory, retrying while the kernel reports it busy.
func rmdir(dir string) error {
	deadline := time.Now().Add(removeTimeout)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("removing %s: %w", dir, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func uniqueRoots(roots map[string]string) []string {
	var out []string
	for _, r := range roots {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

func dirExists(dir string) bool {
	st, err := os.Stat(dir)
	return err == nil && st.IsDir()
}

// ReadCounters reads a flat-keyed cgroup file ("key value" lines, e.g. pids.events,
// memory.events, cpu.stat, memory.oom_control) into a map. Lines whose value is not a number
// are skipped. It and a group's own reads (readCounterList) parse with eachCounter, the one
// parser of such files: the sandbox backend reads runsc's groups with it too. Errors are
// os.ReadFile's (fs.ErrNotExist for a group that is gone).
func ReadCounters(file string) (map[string]uint64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	eachCounter(b, func(k []byte, v uint64) { out[string(k)] = v })
	return out, nil
}

// eachCounter calls fn with each "key value" line of b whose value is a number.
func eachCounter(b []byte, fn func(key []byte, value uint64)) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		k, v, ok := bytes.Cut(bytes.TrimSpace(line), []byte{' '})
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64); err == nil {
			fn(k, n)
		}
	}
}
