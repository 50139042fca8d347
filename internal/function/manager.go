package function

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/nsbox"
	"github.com/zygo-run/zygo/internal/seccomp"
	"github.com/zygo-run/zygo/internal/store"
	"github.com/zygo-run/zygo/internal/zygote"
)

// Registry is what the Manager needs from the store. *store.Store
// implements it; tests may use a fake.
type Registry interface {
	PutVersion(ctx context.Context, v store.Version) error
	SetActive(ctx context.Context, function, hash string) error
	Function(ctx context.Context, name string) (store.FunctionRecord, error)
	Functions(ctx context.Context) ([]store.FunctionRecord, error)
	DeleteFunction(ctx context.Context, name string) error
	AppendLogs(ctx context.Context, lines []store.LogLine) error
}

// HostIDs hands out host ids per owner ("function:NAME"); *hostid.Allocator
// implements it.
type HostIDs interface {
	// Acquire returns owner's id, the same across calls and restarts until
	// Release. Errors wrap errdefs.ErrUnavailable when none is free.
	Acquire(ctx context.Context, owner string) (uint32, error)
	// Release gives owner's id back once its files and processes are gone.
	Release(ctx context.Context, owner string) error
}

// Config configures a Manager.
type Config struct {
	StateDir string // versions/ and run/ live here
	AgentDir string // extracted agents (bound at /opt/zygo/agents)
	Bwrap    string // path of bwrap
	// HostIDs gives each function the host uid (and gid) its sandboxes run
	// as, one no other function shares (internal/hostid); nil keeps the
	// daemon's own uid, the only choice when the daemon is not root.
	HostIDs HostIDs
	// RunTmpfsMiB, when > 0, puts each zygote's run directory on a tmpfs of
	// that size (zygote.Spec.RunTmpfsMiB); 0 leaves it on the state dir's
	// filesystem (a daemon that is not root cannot mount).
	RunTmpfsMiB  int
	ReadyTimeout time.Duration // import + warm-up bound per zygote
	// Limiter places each request in a cgroup (memory_mib, pids, cpu_ms);
	// nil when the daemon cannot manage cgroups (not root): those limits are
	// then not enforced, and the daemon says so at start.
	Limiter Limiter
	Log     *slog.Logger
}

// Manager deploys functions and dispatches invocations. It is safe for
// concurrent use.
type Manager struct {
	cfg     Config
	reg     Registry
	secrets Secrets // nil: functions may not name secrets
	strict  []byte  // the strict seccomp program
	limiter Limiter // nil: no per-request cgroups
	log     *slog.Logger

	deployMu sync.Mutex // serialises Deploy and Remove

	mu  sync.Mutex // guards fns
	fns map[string]*deployment

	logs *logWriter // stores log lines off the request path

	// stopZygote stops a retired deployment's zygote: (*zygote.Zygote).Stop,
	// replaced by tests that need a stop to last.
	stopZygote func(*zygote.Zygote)
}

// NewManager returns a Manager with no functions loaded; call Restore to
// start the ones in the registry. secrets may be nil.
func NewManager(cfg Config, reg Registry, secrets Secrets) (*Manager, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 60 * time.Second
	}
	strict, err := seccomp.Strict()
	if err != nil {
		return nil, err
	}
	return &Manager{cfg: cfg, reg: reg, secrets: secrets, strict: strict, limiter: cfg.Limiter, log: cfg.Log,
		fns: map[string]*deployment{}, logs: newLogWriter(reg.AppendLogs, cfg.Log),
		stopZygote: (*zygote.Zygote).Stop}, nil
}

// DeployResult describes a deployed version.
type DeployResult struct {
	Name      string         `json:"name"`
	Version   string         `json:"version"`
	Unchanged bool           `json:"unchanged"` // the same version was already active
	Mode      Mode           `json:"mode"`
	Fallback  string         `json:"fallback,omitempty"` // why fork mode fell back to spawn
	Checks    []zygote.Check `json:"checks,omitempty"`
	ReadyMs   int64          `json:"ready_ms"` // import + warm-up, milliseconds
}

// ImportFailed is returned by Deploy when the new version fails to import;
// the previous version keeps serving.
type ImportFailed struct {
	*zygote.ImportError
	HadPrevious bool // a previous version exists and keeps serving
}

// Deploy reads a bundle (see ReadBundle), stores it as an immutable version,
// starts its zygote, waits for READY, switches traffic to it and drains the
// old version in the background. Errors: errdefs.ErrInvalidArgument (bad
// bundle or manifest, naming the key), *ImportFailed (wraps
// errdefs.ErrFailedPrecondition; carries the traceback),
// errdefs.ErrUnavailable (sandbox could not start).
func (m *Manager) Deploy(ctx context.Context, bundle io.Reader) (*DeployResult, error) {
	u, err := ReadBundle(bundle)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(u.Manifest.Interpreter); err != nil {
		return nil, fmt.Errorf("%w: zygo.toml: interpreter: %s not found on this host", errdefs.ErrInvalidArgument, u.Manifest.Interpreter)
	}
	if err := m.checkSecrets(ctx, u.Manifest.Secrets); err != nil {
		return nil, err
	}
	m.deployMu.Lock()
	defer m.deployMu.Unlock()

	name := u.Manifest.Name
	uid, err := m.hostID(ctx, name)
	if err != nil {
		return nil, err
	}
	codeDir := m.versionDir(name, u.Hash)
	if err := m.storeVersion(u, codeDir, uid); err != nil {
		return nil, err
	}
	old := m.get(name)
	if old != nil && old.version == u.Hash {
		return old.result(true), nil
	}
	d := newDeployment(m, name, u.Hash, u.Manifest, codeDir, uid)
	if err := d.start(ctx); err != nil {
		var ie *zygote.ImportError
		if errors.As(err, &ie) {
			m.appendLogs(ctx, d.zygoLines("import failed: "+ie.Type+": "+ie.Message+"\n"+ie.Traceback))
			return nil, &ImportFailed{ImportError: ie, HadPrevious: old != nil}
		}
		return nil, err
	}
	mj, _ := json.Marshal(u.Manifest)
	if err := m.reg.PutVersion(ctx, store.Version{Function: name, Hash: u.Hash, Manifest: mj}); err != nil {
		d.stop()
		return nil, err
	}
	if err := m.reg.SetActive(ctx, name, u.Hash); err != nil {
		d.stop()
		return nil, err
	}
	m.mu.Lock()
	m.fns[name] = d
	m.mu.Unlock()
	if old != nil {
		go old.drainAndStop()
	}
	return d.result(false), nil
}

// checkSecrets fails (errdefs.ErrInvalidArgument, naming the secret) when
// a manifest names a secret that is not stored.
func (m *Manager) checkSecrets(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	if m.secrets == nil {
		return fmt.Errorf("%w: zygo.toml: secrets: this daemon has no secret store", errdefs.ErrInvalidArgument)
	}
	missing, err := m.secrets.Missing(ctx, names)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: zygo.toml: secrets: unknown secret %q (set it with `zygo secret set %s`)",
			errdefs.ErrInvalidArgument, missing[0], missing[0])
	}
	return nil
}

func (m *Manager) versionDir(name, hash string) string {
	return filepath.Join(m.cfg.StateDir, "versions", name, strings.TrimPrefix(hash, "sha256:")[:32])
}

func (m *Manager) get(name string) *deployment {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fns[name]
}

// Restore starts every function in the registry (in the background) so
// they come back warm after a daemon restart. It returns once they are all
// starting; invocations wait until their zygote is ready.
func (m *Manager) Restore(ctx context.Context) error {
	recs, err := m.reg.Functions(ctx)
	if err != nil {
		return err
	}
	for _, r := range recs {
		var man Manifest
		if err := json.Unmarshal(r.Active.Manifest, &man); err != nil {
			m.log.Error("restoring function: bad stored manifest", "function", r.Name, "err", err)
			continue
		}
		uid, err := m.hostID(ctx, r.Name)
		if err != nil {
			m.log.Error("restoring function", "function", r.Name, "err", err)
			continue
		}
		codeDir := m.versionDir(r.Name, r.Active.Hash)
		// Versions stored by an older daemon, or for another uid range,
		// are made the function's own again.
		if err := secureCodeDir(filepath.Dir(codeDir), gidOf(uid)); err != nil {
			m.log.Error("restoring function", "function", r.Name, "err", err)
			continue
		}
		d := newDeployment(m, r.Name, r.Active.Hash, &man, codeDir, uid)
		m.mu.Lock()
		m.fns[r.Name] = d
		m.mu.Unlock()
		go func() {
			if err := d.start(context.Background()); err != nil {
				m.log.Error("restoring function", "function", d.name, "err", err)
				d.superviseAfterFailure(err)
			}
		}()
	}
	return nil
}

// Remove stops a function's zygote and deletes it, its versions and its
// logs. errdefs.ErrNotFound if it does not exist.
//
// The sandbox is stopped after deployMu is released: stopping is bounded
// (zygote.Stop), but a Deploy or Remove of another function never waits for
// it.
func (m *Manager) Remove(ctx context.Context, name string) error {
	d, err := m.unregister(ctx, name)
	if err != nil {
		return err
	}
	if d != nil {
		d.stop()
	}
	// Its zygotes are stopped and its code is gone: nothing runs as or
	// belongs to its uid any more (and the allocator skips an id while any
	// host process still runs as it).
	if m.cfg.HostIDs != nil {
		if err := m.cfg.HostIDs.Release(ctx, hostIDOwner(name)); err != nil {
			m.log.Warn("releasing the function's uid", "function", name, "err", err)
		}
	}
	return nil
}

// unregister deletes name from the registry and the loaded functions, marks
// its deployment stopped (no request gets its zygote any more) and removes
// its versions, all under deployMu. It returns the deployment (nil if none
// was loaded), whose sandbox the caller stops.
func (m *Manager) unregister(ctx context.Context, name string) (*deployment, error) {
	m.deployMu.Lock()
	defer m.deployMu.Unlock()
	if err := m.reg.DeleteFunction(ctx, name); err != nil {
		return nil, err
	}
	m.mu.Lock()
	d := m.fns[name]
	delete(m.fns, name)
	m.mu.Unlock()
	if d != nil {
		d.markStopped()
	}
	os.RemoveAll(filepath.Join(m.cfg.StateDir, "versions", name))
	return d, nil
}

// Shutdown stops every zygote (in-flight requests fail). Call once.
func (m *Manager) Shutdown() {
	m.mu.Lock()
	ds := make([]*deployment, 0, len(m.fns))
	for _, d := range m.fns {
		ds = append(ds, d)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, d := range ds {
		wg.Add(1)
		go func() { defer wg.Done(); d.stop() }()
	}
	wg.Wait()
	m.logs.close()
}

// Status is one function as `zygo ls` shows it.
type Status struct {
	Name      string  `json:"name"`
	Version   string  `json:"version"`
	Runtime   Runtime `json:"runtime"`
	Mode      Mode    `json:"mode"`
	State     string  `json:"state"` // starting, ready, restarting, failed, spawn
	Fallback  string  `json:"fallback,omitempty"`
	ZygotePID int     `json:"zygote_pid,omitempty"` // host pid
	InFlight  int     `json:"in_flight"`
	// IdleWorkers counts ready Node workers (runtime "node" only).
	IdleWorkers int       `json:"idle_workers,omitempty"`
	Served      int64     `json:"served"`
	Manifest    *Manifest `json:"manifest"`
}

// List returns every loaded function, sorted by name.
func (m *Manager) List() []Status {
	m.mu.Lock()
	ds := make([]*deployment, 0, len(m.fns))
	for _, d := range m.fns {
		ds = append(ds, d)
	}
	m.mu.Unlock()
	out := make([]Status, 0, len(ds))
	for _, d := range ds {
		out = append(out, d.status())
	}
	sortStatus(out)
	return out
}

// Get returns one function's status; errdefs.ErrNotFound if unknown.
func (m *Manager) Get(name string) (Status, error) {
	d := m.get(name)
	if d == nil {
		return Status{}, fmt.Errorf("function %q: %w", name, errdefs.ErrNotFound)
	}
	return d.status(), nil
}

func (m *Manager) appendLogs(_ context.Context, lines []store.LogLine) {
	m.logs.append(lines)
}

// FlushLogs returns once every log line produced before the call is stored
// (or ctx ends): the logs API calls it so a caller sees its request's lines.
func (m *Manager) FlushLogs(ctx context.Context) { m.logs.Flush(ctx) }

func (m *Manager) zygoteSpec(d *deployment, mode zygote.Mode) zygote.Spec {
	id := newID("z")
	return zygote.Spec{
		Box: nsbox.Spec{
			Bwrap: m.cfg.Bwrap, HostUID: d.uid, Interpreter: d.manifest.Interpreter,
			CodeDir: d.codeDir, AgentDir: m.cfg.AgentDir, EtcDir: filepath.Join(m.cfg.StateDir, "etc"),
		},
		Runtime:      string(d.manifest.Runtime),
		Handler:      d.manifest.Handler,
		Mode:         mode,
		Env:          d.manifest.SortedEnv(),
		RunDir:       filepath.Join(m.cfg.StateDir, "run", id),
		RunTmpfsMiB:  m.cfg.RunTmpfsMiB,
		ReadyTimeout: m.cfg.ReadyTimeout,
		Secrets:      len(d.manifest.Secrets) > 0,
		PreFork:      preFork(d.manifest),
		StrictFilter: m.strict,
		Output:       d.outputSink(),
		Log:          m.log.With("function", d.name, "zygote", id),
	}
}

// newID returns prefix-<unix ms hex>-<6 random bytes hex>: unique,
// roughly time-ordered, not a capability.
func newID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%x-%s", prefix, time.Now().UnixMilli(), hex.EncodeToString(b[:]))
}

func preFork(m *Manifest) int {
	if m.PreFork == nil {
		return 0
	}
	return *m.PreFork
}
