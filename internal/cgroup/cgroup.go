// Package cgroup puts each request's child process into a cgroup of its own, with a
// memory limit and a pids limit, reads what the request used, and kills everything in it.
//
// The walk through a request's life:
//
//	m, _ := cgroup.New("/zygo")            // once, at daemon start (root needed)
//	_ = m.Cleanup()                        // kill and remove groups left by a crashed daemon
//	g, err := m.Place(ctx, "fn/req", pid, cgroup.Limits{MemoryMiB: 256, PIDs: 64, CPUMs: 2000})
//	go g.Enforce(ctx, 20*time.Millisecond) // kills the group past CPUMs or the pids limit
//	...                                    // the request runs
//	limit, value := g.Exceeded()           // after the child died: "memory", "256 MiB"
//	_ = g.Delete()                         // kill what is left, remove the directories
//
// Groups live at <parent>/<name> from the root of every hierarchy used, not under the
// daemon's own cgroup (which may be nested, and limited, by whoever started it). Which
// cgroup version is used is decided once by [New]: v2 when the host is unified; v1 when it
// is legacy or hybrid, because a hybrid host's v2 tree (/sys/fs/cgroup/unified) carries no
// controllers. On v1 the controllers used are memory, pids and cpuacct (required) and
// freezer (optional, used to stop forks while killing).
//
// Directories are created with github.com/containerd/cgroups/v3, which also sets the limits
// and moves the process. Counters are read straight from the few files they live in: the
// library's Stat reads every controller file and lacks pids.events, and Enforce reads the
// counters many times a second.
//
// Nothing here forks: the process placed is started by someone else (a zygote's child).
package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// DefaultParent is the group, from the root of every hierarchy, under which Zygo's groups
// are made when New is given "".
const DefaultParent = "/zygo"

// Controller names. On v2 they all map to the one unified directory.
const (
	ctrlMemory  = "memory"
	ctrlPids    = "pids"
	ctrlCPU     = "cpuacct" // v1 name; on v2 cpu.stat is a core file, present without "cpu"
	ctrlFreezer = "freezer" // v1 only; v2 freezes with the core cgroup.freeze file
)

// unifiedMount is where a unified (v2-only) host mounts its hierarchy.
const unifiedMount = "/sys/fs/cgroup"

// Limits are the limits of one request's group.
type Limits struct {
	MemoryMiB int // memory (RSS, page cache, kernel memory) in MiB; must be > 0; swap is not allowed on top
	PIDs      int // processes and threads alive at once; 0 = unlimited
	CPUMs     int // CPU time in milliseconds; 0 = unlimited. Not enforced by the kernel: see Group.Enforce
}

func (l Limits) validate() error {
	if l.MemoryMiB <= 0 || l.PIDs < 0 || l.CPUMs < 0 {
		return fmt.Errorf("checking limits %+v: memory must be > 0 MiB, pids and cpu >= 0: %w",
			l, errdefs.ErrInvalidArgument)
	}
	return nil
}

func (l Limits) memoryBytes() int64 { return int64(l.MemoryMiB) << 20 }

// Manager makes and removes Zygo's groups under one parent. Its methods are safe for
// concurrent use.
type Manager struct {
	parent string // group path of Zygo's subtree in every hierarchy, e.g. "/zygo"
	v2     bool
	// roots maps a controller to the mount directory of its hierarchy. On v2 every controller
	// maps to the unified mount; on v1 freezer is absent when the host has no freezer.
	roots      map[string]string
	memsw      bool                 // v1: memory.memsw.* exists, so swap is limited with memory
	swapMax    bool                 // v2: memory.swap.max exists, so swap is set to 0
	subsystems []cgroup1.Subsystem  // v1: the controllers handed to the library
	hierOnce   sync.Once            // makes hier
	hier       []string             // one controller per hierarchy (hierarchies)
	mu         sync.Mutex           // guards making and removing directories under parent, and the fields below
	free       map[poolKey][]*Group // empty groups kept by Release for PlacePooled (pool.go)
	nfree      int                  // groups in free
	seq        uint64               // names PlacePooled's new groups
	gens       map[string]uint64    // per prefix, bumped by DropPooled

	// wrapAdd, tests only, wraps the function that moves a process in (failure injection).
	wrapAdd func(add func(pid uint64) error) func(pid uint64) error
}

// New detects the host's cgroup version and prepares parent (an absolute group path such as
// "/zygo"; "" means DefaultParent) in every hierarchy it will use, creating it if missing.
//
// It fails with an error wrapping errdefs.ErrInvalidArgument for a bad parent, and
// errdefs.ErrUnavailable when no cgroup filesystem is mounted, a required controller is
// missing, or the hierarchy is not writable (the daemon must run as root).
func New(parent string) (*Manager, error) {
	if parent == "" {
		parent = DefaultParent
	}
	if !path.IsAbs(parent) || path.Clean(parent) != parent || parent == "/" ||
		strings.HasPrefix(parent, unifiedMount) {
		return nil, fmt.Errorf("checking cgroup parent %q: want an absolute, clean path below the root such as %q: %w",
			parent, DefaultParent, errdefs.ErrInvalidArgument)
	}
	m := &Manager{parent: parent, roots: map[string]string{}}
	var err error
	switch mode := cgroups.Mode(); mode {
	case cgroups.Unified:
		m.v2 = true
		err = m.initV2()
	case cgroups.Legacy, cgroups.Hybrid:
		err = m.initV1()
	default:
		err = fmt.Errorf("no cgroup filesystem mounted at %s: %w", unifiedMount, errdefs.ErrUnavailable)
	}
	if err != nil {
		return nil, fmt.Errorf("opening cgroup hierarchy: %w", err)
	}
	return m, nil
}

// initV1 picks the v1 controllers Zygo needs and makes the parent in each.
func (m *Manager) initV1() error {
	subs, err := cgroup1.Default()
	if err != nil {
		return fmt.Errorf("listing v1 controllers: %w: %w", errdefs.ErrUnavailable, err)
	}
	type pather interface{ Path(string) string }
	for _, s := range subs {
		name := string(s.Name())
		p, ok := s.(pather)
		if !ok {
			continue
		}
		switch name {
		case ctrlMemory, ctrlPids, ctrlCPU, ctrlFreezer:
			m.roots[name] = p.Path("/")
			m.subsystems = append(m.subsystems, s)
		}
	}
	for _, c := range []string{ctrlMemory, ctrlPids, ctrlCPU} {
		if _, ok := m.roots[c]; !ok {
			return fmt.Errorf("v1 controller %q is not mounted under %s: %w", c, unifiedMount, errdefs.ErrUnavailable)
		}
	}
	for _, root := range m.roots {
		if err := makeParent(filepath.Join(root, m.parent)); err != nil {
			return err
		}
	}
	_, err = os.Stat(filepath.Join(m.roots[ctrlMemory], m.parent, "memory.memsw.limit_in_bytes"))
	m.memsw = err == nil
	return nil
}

// initV2 checks the unified hierarchy offers memory and pids and makes the parent with both
// enabled for its children.
func (m *Manager) initV2() error {
	b, err := os.ReadFile(filepath.Join(unifiedMount, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("reading v2 controllers: %w: %w", errdefs.ErrUnavailable, err)
	}
	have := strings.Fields(string(b))
	for _, c := range []string{ctrlMemory, ctrlPids} {
		if !contains(have, c) {
			return fmt.Errorf("v2 controller %q not available at %s (have %q): %w",
				c, unifiedMount, have, errdefs.ErrUnavailable)
		}
	}
	for _, c := range []string{ctrlMemory, ctrlPids, ctrlCPU} {
		m.roots[c] = unifiedMount
	}
	dir := filepath.Join(unifiedMount, m.parent)
	if err := makeParent(dir); err != nil {
		return err
	}
	// Enables memory and pids in the subtree_control of the root and of every level down to
	// the parent, so that the parent's children get the controllers' files.
	res := &cgroup2.Resources{Memory: &cgroup2.Memory{}, Pids: &cgroup2.Pids{}}
	if _, err := cgroup2.NewManager(unifiedMount, m.parent, res); err != nil {
		return fmt.Errorf("enabling memory and pids in %s: %w: %w", dir, errdefs.ErrUnavailable, err)
	}
	if err := enableSubtree(dir, ctrlMemory, ctrlPids); err != nil {
		return err
	}
	// The root now gives memory to the parent, so a missing memory.swap.max means the
	// kernel does not account swap.
	_, err = os.Stat(filepath.Join(dir, "memory.swap.max"))
	m.swapMax = err == nil
	return nil
}

// makeParent creates dir if missing and checks the hierarchy is writable.
func makeParent(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s (the daemon must run as root with cgroups mounted read-write): %w: %w",
			dir, errdefs.ErrUnavailable, err)
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("checking %s is writable (the daemon must run as root with cgroups mounted read-write): %w: %w",
			dir, errdefs.ErrUnavailable, err)
	}
	return nil
}

// enableSubtree turns controllers on for the children of dir (v2).
func enableSubtree(dir string, ctrls ...string) error {
	var b strings.Builder
	for i, c := range ctrls {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("+" + c)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(b.String()), 0); err != nil {
		return fmt.Errorf("enabling %s for children of %s: %w: %w", ctrls, dir, errdefs.ErrUnavailable, err)
	}
	return nil
}

// Version reports the cgroup version in use: 1 or 2.
func (m *Manager) Version() int {
	if m.v2 {
		return 2
	}
	return 1
}

// Place creates the group <parent>/<name> with the memory and pids limits of l, then moves
// the process hostPID (a host pid, not one inside a pid namespace) into it. Only that
// process moves; children it already has stay where they are, children it forks later
// are born in the group. Call it before the process starts the request's work: memory it
// charged before the move stays charged to its old group.
//
// name is a relative path such as "fn/reqid": no leading "/", no "." or ".." components,
// no empty components. Intermediate levels ("fn") are shared and made as needed.
//
// The memory limit counts swap too: v1 sets memory.limit_in_bytes and, when the kernel
// accounts swap, memory.memsw.limit_in_bytes to the same value; v2 sets memory.max,
// memory.swap.max=0 and memory.oom.group=1 (an OOM kill takes the whole group).
//
// Errors wrap errdefs.ErrInvalidArgument (bad name, limits or pid), errdefs.ErrExists (the
// group is already there), errdefs.ErrNotFound (no such process), or the context's error.
// On any error nothing is left behind: the process is moved back and created directories
// are removed.
func (m *Manager) Place(ctx context.Context, name string, hostPID int, l Limits) (*Group, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := l.validate(); err != nil {
		return nil, err
	}
	if hostPID <= 0 {
		return nil, fmt.Errorf("placing pid %d: %w", hostPID, errdefs.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("placing pid %d in %q: %w", hostPID, name, err)
	}
	orig, origUnified, err := cgroups.ParseCgroupFileUnified(fmt.Sprintf("/proc/%d/cgroup", hostPID))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
		}
		return nil, fmt.Errorf("reading cgroups of pid %d: %w", hostPID, err)
	}
	g := &Group{m: m, rel: path.Join(m.parent, name), limits: l}
	add, err := m.create(g)
	if err != nil {
		return nil, err
	}
	if m.wrapAdd != nil {
		add = m.wrapAdd(add)
	}
	if err := add(uint64(hostPID)); err != nil {
		m.moveBack(hostPID, orig, origUnified)
		m.mu.Lock()
		rmErr := m.removeDirsLocked(g.rel)
		m.mu.Unlock()
		if errors.Is(err, unix.ESRCH) {
			err = fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
		}
		return nil, errors.Join(fmt.Errorf("moving pid %d into cgroup %s: %w", hostPID, g.rel, err), rmErr)
	}
	return g, nil
}

// create makes g's directories with its limits and returns the library's function that
// moves a process in. On error it removes what it made.
func (m *Manager) create(g *Group) (add func(pid uint64) error, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, dir := range g.dirs() {
		if _, err := os.Lstat(dir); err == nil {
			return nil, fmt.Errorf("creating cgroup %s: %s exists: %w", g.rel, dir, errdefs.ErrExists)
		}
	}
	if m.v2 {
		add, err = m.createV2Locked(g)
	} else {
		add, err = m.createV1Locked(g)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("creating cgroup %s: %w", g.rel, err), m.removeDirsLocked(g.rel))
	}
	return add, nil
}

func (m *Manager) createV1Locked(g *Group) (func(uint64) error, error) {
	mem := g.limits.memoryBytes()
	res := &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &mem}}
	if m.memsw {
		res.Memory.Swap = &mem // memsw counts memory+swap: equal to the limit means no swap
	}
	if g.limits.PIDs > 0 {
		n := int64(g.limits.PIDs)
		res.Pids = &specs.LinuxPids{Limit: &n}
	}
	hier := func() ([]cgroup1.Subsystem, error) { return m.subsystems, nil }
	cg, err := cgroup1.New(cgroup1.StaticPath(g.rel), res, cgroup1.WithHierarchy(hier))
	if err != nil {
		return nil, err
	}
	return func(pid uint64) error { return cg.AddProc(pid) }, nil
}

func (m *Manager) createV2Locked(g *Group) (func(uint64) error, error) {
	mem, oomGroup := g.limits.memoryBytes(), true
	res := &cgroup2.Resources{
		Memory: &cgroup2.Memory{Max: &mem, OOMGroup: &oomGroup},
		Pids:   &cgroup2.Pids{Max: int64(g.limits.PIDs)}, // 0 writes nothing: "max"
	}
	if m.swapMax {
		var zero int64
		res.Memory.Swap = &zero
	}
	mgr, err := cgroup2.NewManager(unifiedMount, g.rel, res)
	if err != nil {
		return nil, err
	}
	return mgr.AddProc, nil
}

// moveBack returns pid to the groups it was in before Place, best effort: it runs only on
// a failed Place, so that the directories can be removed.
func (m *Manager) moveBack(pid int, orig map[string]string, origUnified string) {
	for ctrl, root := range m.roots {
		p := origUnified
		if !m.v2 {
			p = orig[ctrl]
		}
		if p == "" {
			continue
		}
		_ = os.WriteFile(filepath.Join(root, p, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0)
	}
}

// Cleanup kills every process in, and removes, every group under the parent: what a
// crashed daemon left behind. Call it at start-up before the first Place; it would also
// destroy live groups. It takes up to a few seconds per group that will not die. The
// error joins one error per group that could not be removed.
func (m *Manager) Cleanup() error {
	m.mu.Lock()
	free := m.free
	m.free, m.nfree = nil, 0
	m.mu.Unlock()
	for _, groups := range free {
		for _, g := range groups {
			g.closeFiles() // their directories go below, by name
		}
	}
	names := map[string]bool{}
	for _, root := range m.roots {
		ents, err := os.ReadDir(filepath.Join(root, m.parent))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cleaning up cgroups under %s: %w", m.parent, err)
		}
		for _, e := range ents {
			if e.IsDir() {
				names[e.Name()] = true
			}
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	var errs []error
	for _, n := range sorted {
		g := &Group{m: m, rel: path.Join(m.parent, n)}
		if err := g.Delete(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cleaning up cgroups under %s: %w", m.parent, err)
	}
	return nil
}

// checkName validates a group name relative to the parent.
func checkName(name string) error {
	bad := name == "" || strings.HasPrefix(name, "/") || strings.ContainsAny(name, "\x00\n")
	for _, c := range strings.Split(name, "/") {
		if c == "" || c == "." || c == ".." {
			bad = true
		}
	}
	if bad {
		return fmt.Errorf("checking cgroup name %q: want a relative path like \"fn/req\" without \".\", \"..\" or empty parts: %w",
			name, errdefs.ErrInvalidArgument)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Close kills and removes every group under the parent (Cleanup), then
// removes the parent itself and the levels above it that are left empty,
// up to but not including the hierarchy root. Call it once, at shutdown,
// after the last request. Errors are returned joined; a non-empty level is
// left in place silently (another daemon may use it).
func (m *Manager) Close() error {
	err := m.Cleanup()
	for _, root := range m.roots {
		for rel := m.parent; rel != "/" && rel != "." && rel != ""; rel = path.Dir(rel) {
			if rmErr := os.Remove(filepath.Join(root, rel)); rmErr != nil {
				break // not empty (another daemon's groups), or already gone
			}
		}
	}
	return err
}
