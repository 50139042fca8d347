package pool

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/secret"
	"github.com/zygo-run/zygo/internal/store"
)

// Registry is what the Manager needs of the store; *store.Store implements it.
type Registry interface {
	PutPool(ctx context.Context, p store.PoolRecord) error
	Pools(ctx context.Context) ([]store.PoolRecord, error)
	DeletePool(ctx context.Context, name string) error
	AppendLogs(ctx context.Context, lines []store.LogLine) error
}

// Config configures a Manager.
type Config struct {
	StateDir string // pools/NAME/{boot,scripts} live here
	// Launcher makes each lane's runtime (a function.Runner of kind fork).
	Launcher function.Launcher
	// HostIDs gives each pool its own host uid (owner "pool:NAME"); nil
	// keeps the daemon's uid.
	HostIDs function.HostIDs
	// Limiter places each request in a cgroup (memory_mib, pids, cpu_ms);
	// nil: not enforced.
	Limiter function.Limiter
	// Secrets holds the tenants' secrets (secret.TenantName); nil: runs
	// naming secrets are refused.
	Secrets      function.Secrets
	ReadyTimeout time.Duration
	// Mount makes the detached read-only mount of a script's directory;
	// nil is mountRO. Tests replace it to exercise the fallback.
	Mount func(dir string) (*os.File, error)
	Log   *slog.Logger
}

// Manager keeps the daemon's runtime pools. It is safe for concurrent use.
type Manager struct {
	cfg Config
	reg Registry
	log *slog.Logger

	mu    sync.Mutex // guards pools
	pools map[string]*pool

	upMu sync.Mutex // serialises Up and Remove

	ctx    context.Context // cancelled by Shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// pool is one pool's live state.
type pool struct {
	m        *Manager
	name     string
	raw      []byte // the zygo.toml it was made with
	man      *Manifest
	created  time.Time
	hostUID  uint32
	bootDir  string // pools/NAME/boot/HASH: the generated boot module
	bootHash string
	scripts  scriptStore
	adm      *admission
	log      *slog.Logger

	mu      sync.Mutex // guards lanes, removed, warmup and each lane's counters
	lanes   map[string]*lane
	removed bool
	warmup  function.Warmup // the latest lane start's report
}

// NewManager returns a Manager with no pools; Restore starts the stored ones.
func NewManager(cfg Config, reg Registry) *Manager {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 60 * time.Second
	}
	if cfg.Mount == nil {
		cfg.Mount = mountRO
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{cfg: cfg, reg: reg, log: cfg.Log, pools: map[string]*pool{}, ctx: ctx, cancel: cancel}
	m.goTracked(m.reapLoop)
	return m
}

func (m *Manager) goTracked(f func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
}

// owner is the pool's name wherever it shares a namespace with functions
// (host ids, cgroups, logs): "pool:NAME", which no function name can be.
func (p *pool) owner() string { return "pool:" + p.name }

// Restore makes every stored pool, re-groups its files for the pool's
// current uid (secureFiles) and starts its shared zygote in the background
// (requests wait for it). A record that no longer parses, or whose files
// cannot be re-grouped, is logged and skipped.
func (m *Manager) Restore(ctx context.Context) error {
	recs, err := m.reg.Pools(ctx)
	if err != nil {
		return err
	}
	for _, r := range recs {
		p, err := m.makePool(ctx, r.Name, r.Manifest, r.Created)
		if err == nil {
			err = p.secureFiles()
		}
		if err != nil {
			m.log.Warn("restoring pool", "pool", r.Name, "err", err)
			continue
		}
		m.mu.Lock()
		m.pools[p.name] = p
		m.mu.Unlock()
		if p.man.Isolation == IsolationShared {
			p.mu.Lock()
			_, _ = p.newLaneLocked(sharedLane)
			p.mu.Unlock()
		}
	}
	return nil
}

// UpResult is what Up reports.
type UpResult struct {
	Name      string
	Unchanged bool            // the same manifest was already up
	Warmup    function.Warmup // the shared zygote's report (isolation "shared")
}

// Up creates or replaces pool from its zygo.toml (raw): the manifest is
// checked, the boot module written, and (isolation "shared") the shared
// zygote started and its warm-up awaited before the pool is switched in;
// a pool it replaces is drained and stopped in the background. Errors:
// ErrInvalidArgument naming the key; *agentproc.ImportError when a
// preload failed to import (nothing replaced).
func (m *Manager) Up(ctx context.Context, raw []byte) (UpResult, error) {
	man, err := ParseManifest(raw)
	if err != nil {
		return UpResult{}, err
	}
	if err := function.CheckInterpreter(m.cfg.StateDir, man.Interpreter); err != nil {
		return UpResult{}, err
	}
	m.upMu.Lock()
	defer m.upMu.Unlock()
	old := m.lookup(man.Name)
	if old != nil && bytes.Equal(old.raw, raw) {
		return UpResult{Name: man.Name, Unchanged: true, Warmup: old.currentWarmup()}, nil
	}
	p, err := m.makePool(ctx, man.Name, raw, time.Now())
	if err != nil {
		return UpResult{}, err
	}
	res := UpResult{Name: p.name}
	if man.Isolation == IsolationShared {
		p.mu.Lock()
		l, err := p.newLaneLocked(sharedLane)
		p.mu.Unlock()
		if err != nil {
			return UpResult{}, err
		}
		select {
		case <-l.ready:
		case <-ctx.Done():
			p.stopAll()
			return UpResult{}, ctx.Err()
		}
		if l.err != nil {
			p.stopAll()
			return UpResult{}, l.err
		}
		res.Warmup = p.currentWarmup()
		if err := sharedIsolationSupported(res.Warmup.Ready); err != nil {
			p.stopAll()
			return UpResult{}, err
		}
	}
	if err := m.reg.PutPool(ctx, store.PoolRecord{Name: p.name, Manifest: raw, Created: p.created}); err != nil {
		p.stopAll()
		return UpResult{}, err
	}
	m.mu.Lock()
	m.pools[p.name] = p
	m.mu.Unlock()
	if old != nil {
		m.goTracked(old.retire)
	}
	return res, nil
}

// sharedIsolationSupported refuses a shared pool whose zygote reported
// (ready's "landlock" check at level "warn") a kernel without Landlock
// scoping (ABI < 6): its requests could not be kept from one another's
// sockets and signals, and each would fail (agents/python pool.py).
// Errors: ErrInvalidArgument naming isolation.
func sharedIsolationSupported(ready agentproc.Ready) error {
	for _, c := range ready.Checks {
		if c.Name == "landlock" && c.Level == "warn" {
			return fmt.Errorf("%w: zygo.toml: isolation: %q needs Landlock ABI 6 (Linux 6.12) to keep tenants apart and this kernel has %s; use isolation = %q or a newer kernel",
				errdefs.ErrInvalidArgument, IsolationShared, landlockHave(c.Detail), IsolationPerTenant)
		}
	}
	return nil
}

// landlockHave returns the start of a landlock check's detail up to its
// first " (": "Landlock ABI 4" or "no Landlock".
func landlockHave(detail string) string {
	if i := strings.Index(detail, " ("); i > 0 {
		return detail[:i]
	}
	return "an older Landlock"
}

// makePool builds a pool's state from its manifest: host id, boot module
// directory (pools/NAME/boot/HASH), script store.
func (m *Manager) makePool(ctx context.Context, name string, raw []byte, created time.Time) (*pool, error) {
	man, err := ParseManifest(raw)
	if err != nil {
		return nil, err
	}
	if man.Name != name {
		return nil, fmt.Errorf("%w: zygo.toml: name: %q is not the pool's name %q", errdefs.ErrInvalidArgument, man.Name, name)
	}
	p := &pool{m: m, name: name, raw: raw, man: man, created: created, adm: newAdmission(man),
		lanes: map[string]*lane{}, log: m.log.With("pool", name)}
	if m.cfg.HostIDs != nil {
		if p.hostUID, err = m.cfg.HostIDs.Acquire(ctx, p.owner()); err != nil {
			return nil, fmt.Errorf("giving pool %q a uid: %w", name, err)
		}
	}
	gid := -1
	if p.hostUID != 0 {
		gid = int(p.hostUID)
	}
	root := filepath.Join(m.cfg.StateDir, "pools", name)
	if err := os.MkdirAll(filepath.Join(root, "scripts"), 0o711); err != nil {
		return nil, fmt.Errorf("making the pool's directory: %w", err)
	}
	if err := os.Chmod(filepath.Join(m.cfg.StateDir, "pools"), 0o711); err != nil {
		return nil, err
	}
	src := man.bootSource()
	sum := sha256.Sum256(src)
	p.bootHash = hex.EncodeToString(sum[:])
	p.bootDir = filepath.Join(root, "boot", p.bootHash)
	if _, err := os.Stat(p.bootDir); err != nil {
		if err := writeBoot(p.bootDir, src, gid); err != nil {
			return nil, err
		}
	}
	p.scripts = scriptStore{root: filepath.Join(root, "scripts"), gid: gid}
	return p, nil
}

// secureFiles makes the pool's boot modules and every tenant's scripts
// the pool's own again (group: its current uid; function.SecureCodeDir):
// files stored by an older daemon, or under another uid range, would
// otherwise stay unreadable to the pool's sandboxes and readable to
// whatever now has their old gid. Leftover ".partial" directories are
// removed. Errors: the first file that could not be re-grouped.
func (p *pool) secureFiles() error {
	gid := -1
	if p.hostUID != 0 {
		gid = int(p.hostUID)
	}
	root := filepath.Join(p.m.cfg.StateDir, "pools", p.name)
	boots, err := os.ReadDir(filepath.Join(root, "boot"))
	if err != nil {
		return fmt.Errorf("securing the pool's boot modules: %w", err)
	}
	for _, e := range boots {
		if err := secureOrDrop(filepath.Join(root, "boot", e.Name()), hashRE.MatchString(e.Name()), gid); err != nil {
			return err
		}
	}
	tenants, err := os.ReadDir(p.scripts.root)
	if err != nil {
		return fmt.Errorf("securing the pool's scripts: %w", err)
	}
	for _, t := range tenants {
		scripts, err := os.ReadDir(filepath.Join(p.scripts.root, t.Name()))
		if err != nil {
			return fmt.Errorf("securing the scripts of tenant %q: %w", t.Name(), err)
		}
		for _, e := range scripts {
			if err := secureOrDrop(filepath.Join(p.scripts.root, t.Name(), e.Name()), hashRE.MatchString(e.Name()), gid); err != nil {
				return err
			}
		}
	}
	return nil
}

// secureOrDrop re-groups dir for gid when keep, else removes it (a
// partial write a crash left behind).
func secureOrDrop(dir string, keep bool, gid int) error {
	if !keep {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("removing %s: %w", dir, err)
		}
		return nil
	}
	return function.SecureCodeDir(dir, gid)
}

// writeBoot writes the boot module into dir (made here, read-only to the
// pool's gid).
func writeBoot(dir string, src []byte, gid int) error {
	tmp := dir + ".partial"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o750); err != nil {
		return fmt.Errorf("writing the pool's boot module: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, BootModule+".py"), src, 0o440); err != nil {
		return fmt.Errorf("writing the pool's boot module: %w", err)
	}
	if err := function.SecureCodeDir(tmp, gid); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Dir(tmp), 0o711); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

func (m *Manager) lookup(name string) *pool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pools[name]
}

func (m *Manager) get(name string) (*pool, error) {
	if p := m.lookup(name); p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("pool %q: %w", name, errdefs.ErrNotFound)
}

func (p *pool) currentWarmup() function.Warmup {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.warmup
}

// retire drains a replaced pool's lanes and stops them.
func (p *pool) retire() {
	p.mu.Lock()
	p.removed = true
	lanes := make([]*lane, 0, len(p.lanes))
	for _, l := range p.lanes {
		lanes = append(lanes, l)
	}
	p.lanes = map[string]*lane{}
	p.mu.Unlock()
	for _, l := range lanes {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(p.man.Limits.TimeoutMs)*time.Millisecond+5*time.Second)
		<-l.ready
		_ = l.runner.Drain(ctx)
		cancel()
		l.runner.Stop()
	}
}

// stopAll stops every lane at once (a pool that never went live).
func (p *pool) stopAll() {
	p.mu.Lock()
	p.removed = true
	lanes := p.lanes
	p.lanes = map[string]*lane{}
	p.mu.Unlock()
	for _, l := range lanes {
		l.runner.Stop()
	}
}

// Remove deletes pool name: its record, its lanes (requests in flight
// fail), its scripts and boot module, its uid. Errors: ErrNotFound.
func (m *Manager) Remove(ctx context.Context, name string) error {
	m.upMu.Lock()
	defer m.upMu.Unlock()
	p, err := m.get(name)
	if err != nil {
		return err
	}
	if err := m.reg.DeletePool(ctx, name); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	m.mu.Lock()
	delete(m.pools, name)
	m.mu.Unlock()
	p.stopAll()
	if err := os.RemoveAll(filepath.Join(m.cfg.StateDir, "pools", name)); err != nil {
		m.log.Warn("removing pool files", "pool", name, "err", err)
	}
	if m.cfg.Limiter != nil {
		_ = m.cfg.Limiter.DropPooled(p.owner())
	}
	if m.cfg.HostIDs != nil {
		if err := m.cfg.HostIDs.Release(ctx, p.owner()); err != nil {
			m.log.Warn("releasing pool uid", "pool", name, "err", err)
		}
	}
	return nil
}

// Status is a pool as `zygo pool ls` shows it.
type Status struct {
	Name      string
	Manifest  Manifest
	Created   time.Time
	Lanes     []LaneStatus // shared first, then tenants by name
	Running   int          // requests admitted now, all tenants
	Waiting   int          // requests waiting for a tenant slot
	Tenants   int          // tenants with a request admitted or waiting
	Fallback  string       // set when the zygote serves by spawning (threads at warm-up)
	Preloaded []string
}

// LaneStatus is one zygote of a pool.
type LaneStatus struct {
	Lane     string // "shared" or "tenant:T"
	State    string // "starting", "ready", "failed"
	HostPID  int
	InFlight int
}

// List returns every pool's status, by name.
func (m *Manager) List() []Status {
	m.mu.Lock()
	ps := make([]*pool, 0, len(m.pools))
	for _, p := range m.pools {
		ps = append(ps, p)
	}
	m.mu.Unlock()
	sort.Slice(ps, func(i, j int) bool { return ps[i].name < ps[j].name })
	out := make([]Status, len(ps))
	for i, p := range ps {
		out[i] = p.status()
	}
	return out
}

// Get returns one pool's status; ErrNotFound.
func (m *Manager) Get(name string) (Status, error) {
	p, err := m.get(name)
	if err != nil {
		return Status{}, err
	}
	return p.status(), nil
}

func (p *pool) status() Status {
	st := Status{Name: p.name, Manifest: *p.man, Created: p.created, Preloaded: p.man.Preload}
	st.Running, st.Waiting, st.Tenants = p.adm.stats()
	p.mu.Lock()
	st.Fallback = p.warmup.Fallback
	for _, l := range p.lanes {
		ls := LaneStatus{Lane: laneName(l.key), State: "starting", InFlight: l.inflight}
		select {
		case <-l.ready:
			ls.State = "ready"
			if l.err != nil {
				ls.State = "failed"
			} else {
				ls.HostPID = l.runner.Status().HostPID
			}
		default:
		}
		st.Lanes = append(st.Lanes, ls)
	}
	p.mu.Unlock()
	sort.Slice(st.Lanes, func(i, j int) bool {
		a, b := st.Lanes[i].Lane, st.Lanes[j].Lane
		return a == "shared" || (b != "shared" && a < b)
	})
	return st
}

// PutScript stores a tenant's script in pool name and returns its hash
// (the same for the same files). Errors: ErrNotFound, ErrInvalidArgument.
func (m *Manager) PutScript(name, tenant string, s Script) (string, error) {
	p, err := m.get(name)
	if err != nil {
		return "", err
	}
	if err := secret.ValidTenant("tenant", tenant); err != nil {
		return "", err
	}
	return p.scripts.put(tenant, s)
}

// reapLoop stops idle tenant lanes until Shutdown.
func (m *Manager) reapLoop() {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case now := <-t.C:
			m.mu.Lock()
			ps := make([]*pool, 0, len(m.pools))
			for _, p := range m.pools {
				ps = append(ps, p)
			}
			m.mu.Unlock()
			for _, p := range ps {
				p.reapIdle(now, time.Duration(p.man.Tenant.IdleS)*time.Second)
			}
		}
	}
}

// Shutdown stops every pool's zygotes and waits for the Manager's
// goroutines.
func (m *Manager) Shutdown() {
	m.cancel()
	m.mu.Lock()
	ps := make([]*pool, 0, len(m.pools))
	for _, p := range m.pools {
		ps = append(ps, p)
	}
	m.mu.Unlock()
	for _, p := range ps {
		p.stopAll()
	}
	m.wg.Wait()
}
