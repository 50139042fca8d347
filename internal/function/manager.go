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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/cleanup"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/metrics"
	"github.com/zygo-run/zygo/internal/network"
	"github.com/zygo-run/zygo/internal/seccomp"
	"github.com/zygo-run/zygo/internal/store"
)

// Registry is what the Manager needs from the store. *store.Store
// implements it; tests may use a fake.
type Registry interface {
	PutVersion(ctx context.Context, v store.Version) error
	SetActive(ctx context.Context, function, hash string) error
	Function(ctx context.Context, name string) (store.FunctionRecord, error)
	Functions(ctx context.Context) ([]store.FunctionRecord, error)
	DeleteFunction(ctx context.Context, name string) error
	// Versions lists a function's stored versions, newest first.
	Versions(ctx context.Context, function string) ([]store.Version, error)
	// DeleteVersion removes one stored version (never the active one).
	DeleteVersion(ctx context.Context, function, hash string) error
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
	// that size (agentproc.Spec.RunTmpfsMiB); 0 leaves it on the state dir's
	// filesystem (a daemon that is not root cannot mount).
	RunTmpfsMiB  int
	ReadyTimeout time.Duration // import + warm-up bound per zygote
	// RandGuard says AgentDir holds the native-randomness guard
	// (nsbox.RandGuardPath); fork-mode Python zygotes then preload it. False
	// when it was not built (the warm-up check native_random says so).
	RandGuard bool
	// NoHugePages keeps fork-mode Python zygotes' code and heap on small
	// pages (the agent's --no-huge-pages; agents/python/zygo_agent/hugetext.py).
	NoHugePages bool
	// Limiter places each request in a cgroup (memory_mib, pids, cpu_ms);
	// nil when the daemon cannot manage cgroups (not root): those limits are
	// then not enforced, and the daemon says so at start.
	Limiter Limiter
	// KeepVersions is how many versions of a function are kept (in the
	// store and on disk), the active one included, for `zygo rollback` and a
	// quick redeploy; older ones are collected after each deploy or
	// rollback, once no runtime uses them (a draining version is collected
	// when its drain ends). Default 10; 1 keeps only the active version.
	KeepVersions int
	// BodyBudgetBytes bounds the memory all events being read or held by
	// in-flight requests take together, bytes; a request waits for room
	// before its event is read. Default (and minimum) 4 × MaxBodyKiB.
	BodyBudgetBytes int64
	// Runtimes makes the runtimes that serve deployments; nil: the
	// bubblewrap sandboxes of NewSandboxLauncher, configured from the
	// fields above.
	Runtimes Launcher
	// Network attaches functions with [network] egress = "allow" (one
	// endpoint per deployment, netns.go); nil when the daemon has no
	// networking: deploying such a function is then refused.
	Network *network.Host
	// Metrics receives each function's request counts and zygote restarts
	// (metrics.go); nil keeps none.
	Metrics *metrics.Registry
	Log     *slog.Logger
}

// Manager deploys functions and dispatches invocations. It is safe for
// concurrent use.
type Manager struct {
	cfg     Config
	reg     Registry
	secrets Secrets // nil: functions may not name secrets
	limiter Limiter // nil: no per-request cgroups
	log     *slog.Logger

	names  nameLocks   // one lock per function name: serialises its Deploy, Remove and version GC
	bodies *byteBudget // memory of events being read or held

	mu    sync.Mutex // guards fns, inUse and pending
	fns   map[string]*deployment
	inUse map[string]int // version dir → deployments not yet fully stopped that run it
	// pending maps a function to the version a deploy or rollback is
	// starting in place of its serving one (Status.Deploying).
	pending map[string]string

	logs *logWriter // stores log lines off the request path

	runtimes Launcher
	// restartBackoff is the first and the longest wait between failed
	// restarts of a deployment (restartBackoffMin, restartBackoffMax).
	restartBackoff [2]time.Duration
	// stopRunner stops a deployment's runtime: Runner.Stop, replaced by
	// tests that need a stop to last.
	stopRunner func(Runner)

	// ctx is cancelled by Shutdown: restarts, retirements and back-offs end
	// with it. wg counts every goroutine the Manager starts (goTracked);
	// Shutdown waits for them.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	wgMu   sync.Mutex // guards shut, and orders wg.Add before Shutdown's Wait
	shut   bool

	shutdown sync.Once
}

// DefaultKeepVersions is Config.KeepVersions' default (zygo serve
// --keep-versions).
const DefaultKeepVersions = 10

// NewManager returns a Manager with no functions loaded; call Restore to
// start the ones in the registry. secrets may be nil.
func NewManager(cfg Config, reg Registry, secrets Secrets) (*Manager, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 60 * time.Second
	}
	if cfg.KeepVersions <= 0 {
		cfg.KeepVersions = DefaultKeepVersions
	}
	cfg.BodyBudgetBytes = max(cfg.BodyBudgetBytes, 4*MaxBodyKiB<<10)
	strict, err := seccomp.Strict()
	if err != nil {
		return nil, err
	}
	if cfg.Runtimes == nil {
		cfg.Runtimes = NewSandboxLauncher(SandboxConfig{StateDir: cfg.StateDir, AgentDir: cfg.AgentDir, Bwrap: cfg.Bwrap,
			RunTmpfsMiB: cfg.RunTmpfsMiB, ReadyTimeout: cfg.ReadyTimeout, RandGuard: cfg.RandGuard,
			NoHugePages: cfg.NoHugePages, StrictFilter: strict, Limiter: cfg.Limiter})
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{cfg: cfg, reg: reg, secrets: secrets, limiter: cfg.Limiter, log: cfg.Log,
		fns: map[string]*deployment{}, inUse: map[string]int{}, pending: map[string]string{}, bodies: newByteBudget(cfg.BodyBudgetBytes),
		logs: newLogWriter(reg.AppendLogs, cfg.Log), runtimes: cfg.Runtimes, stopRunner: Runner.Stop,
		restartBackoff: [2]time.Duration{restartBackoffMin, restartBackoffMax},
		ctx:            ctx, cancel: cancel}, nil
}

// shuttingDown reports whether goTracked now runs its work inline.
func (m *Manager) shuttingDown() bool {
	m.wgMu.Lock()
	defer m.wgMu.Unlock()
	return m.shut
}

// goTracked runs f on a goroutine Shutdown waits for; after Shutdown it
// runs f at once instead.
func (m *Manager) goTracked(f func()) {
	m.wgMu.Lock()
	if m.shut {
		m.wgMu.Unlock()
		f()
		return
	}
	m.wg.Add(1)
	m.wgMu.Unlock()
	go func() {
		defer m.wg.Done()
		f()
	}()
}

// backoff waits d; false when the Manager shut down or done closed first.
func (m *Manager) backoff(d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
	case <-m.ctx.Done():
	}
	return false
}

// newRunner makes the runtime that serves d (not started).
func (m *Manager) newRunner(d *deployment) (Runner, error) {
	netns, resolv := d.netNS()
	opts := RunnerOptions{Kind: KindOf(d.manifest), Function: d.name, Version: d.version,
		Manifest: d.manifest, CodeDir: d.codeDir, HostUID: d.uid, NetNS: netns, ResolvConf: resolv,
		Output: d.outputSink(), Log: m.log.With("function", d.name)}
	if m.limiter != nil {
		opts.Hold = m.holdInCgroup(d)
	}
	return m.runtimes.NewRunner(opts)
}

// DeployResult describes a deployed version.
type DeployResult struct {
	Name      string            `json:"name"`
	Version   string            `json:"version"`
	Unchanged bool              `json:"unchanged"` // the same version was already active
	Mode      Mode              `json:"mode"`
	Fallback  string            `json:"fallback,omitempty"` // why fork mode fell back to spawn
	Checks    []agentproc.Check `json:"checks,omitempty"`
	ReadyMs   int64             `json:"ready_ms"` // import + warm-up, milliseconds
	// Warnings are sentences for whoever deploys: limits of the manifest this daemon cannot
	// enforce (limitWarnings).
	Warnings []string `json:"warnings,omitempty"`
}

// ImportFailed is returned by Deploy when the new version fails to import;
// the previous version, if there is one, keeps serving.
type ImportFailed struct {
	*agentproc.ImportError
	HadPrevious bool // a previous version exists and keeps serving
}

// Outcome says what a caller is left with, for the start of a message: the
// previous version serving, or (a first deploy) no version at all.
func (e *ImportFailed) Outcome() string {
	if e.HadPrevious {
		return "the new version failed to import; the previous version keeps serving"
	}
	return "the function failed to import; no version of it was deployed"
}

// Deploy reads a bundle (see ReadBundle), stores it as an immutable version,
// starts its zygote, waits for READY, switches traffic to it and drains the
// old version in the background; then it collects superseded versions
// beyond Config.KeepVersions. A function's first version is listed as
// "deploying" while it starts, and invokes wait for it. Steps are reported
// to ctx's progress function (WithProgress). Only deploys, rollbacks and
// removals of the same name wait for each other. Errors:
// errdefs.ErrInvalidArgument (bad bundle, manifest or interpreter, naming
// the key), *ImportFailed (wraps errdefs.ErrFailedPrecondition; carries the
// traceback, or the import_timeout_ms exceeded), errdefs.ErrUnavailable
// (sandbox could not start), ctx's error when ctx ends first (the new
// runtime is stopped). A failed deploy leaves no version directory it made
// behind, and the previous version keeps serving.
func (m *Manager) Deploy(ctx context.Context, bundle io.Reader) (*DeployResult, error) {
	ReportProgress(ctx, Progress{Step: StepUploading})
	u, err := ReadBundle(bundle)
	if err != nil {
		return nil, err
	}
	if err := m.checkDeployable(ctx, u.Manifest); err != nil {
		return nil, err
	}
	name := u.Manifest.Name
	unlock := m.names.lock(name)
	defer unlock()

	old := m.get(name)
	if old != nil && old.version == u.Hash {
		res := old.result(true)
		res.Warnings = m.limitWarnings(u.Manifest)
		return res, nil
	}
	uid, err := m.hostID(ctx, name)
	if err != nil {
		return nil, err
	}
	var undo cleanup.Stack // run newest first when the deploy fails
	defer func() { _ = undo.Run(ctx, 0) }()
	ReportProgress(ctx, Progress{Step: StepUnpacking, Version: u.Hash})
	codeDir := m.versionDir(name, u.Hash)
	created, err := storeVersionDir(u, codeDir)
	if err != nil {
		return nil, err
	}
	if created {
		undo.Add(func(context.Context) error { m.removeVersionDir(name, codeDir); return nil })
	}
	if err := secureCodeDir(filepath.Dir(codeDir), gidOf(uid)); err != nil {
		return nil, err
	}
	res, err := m.rollout(ctx, &undo, old, m.newDeployment(name, u.Hash, u.Manifest, codeDir, uid))
	if err != nil {
		return nil, err
	}
	undo.Release()
	return res, nil
}

// checkDeployable refuses (errdefs.ErrInvalidArgument, naming the key) a
// manifest this daemon cannot serve now: its interpreter, secrets or
// network.
func (m *Manager) checkDeployable(ctx context.Context, man *Manifest) error {
	if err := m.checkInterpreter(man.Interpreter); err != nil {
		return err
	}
	if err := m.checkSecrets(ctx, man.Secrets); err != nil {
		return err
	}
	return m.checkNetwork(man)
}

// rollout puts d (a new deployment of its function, not started) in
// service in place of old (nil for a first deploy): it starts d's runtime,
// records d's version as the active one, moves traffic, retires old in the
// background and collects superseded versions. A first deploy publishes d
// before it starts (listed as deploying; invokes wait for it). On failure
// it returns with its undo entries on undo (stopping d, withdrawing it),
// which the caller runs; the error is what startFailed makes of it. The
// caller holds the name's lock.
func (m *Manager) rollout(ctx context.Context, undo *cleanup.Stack, old, d *deployment) (*DeployResult, error) {
	undo.Add(func(context.Context) error { d.stop(); return nil })
	m.mu.Lock()
	m.pending[d.name] = d.version
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.pending, d.name)
		m.mu.Unlock()
	}()
	if old == nil {
		d.firstDeploy = true
		m.mu.Lock()
		m.fns[d.name] = d
		m.mu.Unlock()
		undo.Add(func(context.Context) error { // before d.stop: waiters then find it withdrawn
			d.deployFailed.Store(true)
			m.mu.Lock()
			if m.fns[d.name] == d {
				delete(m.fns, d.name)
			}
			m.mu.Unlock()
			return nil
		})
	}
	ReportProgress(ctx, Progress{Step: StepImporting, Version: d.version})
	if err := m.activate(ctx, d); err != nil {
		return nil, m.startFailed(ctx, d, err, old != nil)
	}
	res := d.result(false)
	ReportProgress(ctx, Progress{Step: StepWarmup, Version: d.version, Checks: res.Checks})
	m.mu.Lock()
	m.fns[d.name] = d
	m.mu.Unlock()
	if old != nil {
		m.goTracked(func() { m.retire(old) })
	}
	m.collectVersionsLocked(context.WithoutCancel(ctx), d.name)
	m.log.Info("function deployed", "function", d.name, "version", d.version, "mode", res.Mode, "ready_ms", res.ReadyMs)
	res.Warnings = m.limitWarnings(d.manifest)
	ReportProgress(ctx, Progress{Step: StepReady, Version: d.version})
	return res, nil
}

// startFailed is the error a deploy or rollback of d returns when its
// start failed with err: ctx's own end as it is (logged: the caller went
// away), an import error or an import over its time as *ImportFailed (with
// the lines logged), an interpreter that did not start as its manifest
// error; hadPrevious says whether a previous version keeps serving.
func (m *Manager) startFailed(ctx context.Context, d *deployment, err error, hadPrevious bool) error {
	if ctx.Err() != nil {
		m.log.Info("deploy cancelled", "function", d.name, "version", d.version)
		m.appendLogs(ctx, d.zygoLines("deploy of "+d.version+" cancelled by the caller"))
		return fmt.Errorf("deploying %q: %w", d.name, ctx.Err())
	}
	var ie *agentproc.ImportError
	if errors.As(err, &ie) {
		m.appendLogs(ctx, d.zygoLines("import failed: "+ie.Type+": "+ie.Message+"\n"+ie.Traceback))
		return &ImportFailed{ImportError: ie, HadPrevious: hadPrevious}
	}
	if errors.Is(err, errdefs.ErrDeadlineExceeded) {
		ie := &agentproc.ImportError{Type: "ImportTimeout", Message: m.importTimeoutMessage(d.manifest)}
		m.appendLogs(ctx, d.zygoLines("import failed: "+ie.Message))
		return &ImportFailed{ImportError: ie, HadPrevious: hadPrevious}
	}
	return interpreterFailed(d.manifest, err)
}

// importTimeout is how long each start of man's sandboxes may take:
// limits.import_timeout_ms, else Config.ReadyTimeout.
func (m *Manager) importTimeout(man *Manifest) time.Duration {
	if man.Limits.ImportTimeoutMs > 0 {
		return time.Duration(man.Limits.ImportTimeoutMs) * time.Millisecond
	}
	return m.cfg.ReadyTimeout
}

func (m *Manager) importTimeoutMessage(man *Manifest) string {
	if man.Limits.ImportTimeoutMs > 0 {
		return fmt.Sprintf("the import and warm-up took longer than limits.import_timeout_ms=%d", man.Limits.ImportTimeoutMs)
	}
	return fmt.Sprintf("the import and warm-up took longer than the daemon's --ready-timeout (%s); set limits.import_timeout_ms in zygo.toml to allow more",
		m.cfg.ReadyTimeout)
}

// activate starts d's zygote and records its version as the active one.
func (m *Manager) activate(ctx context.Context, d *deployment) error {
	if err := d.start(ctx); err != nil {
		return err
	}
	mj, _ := json.Marshal(d.manifest)
	if err := m.reg.PutVersion(ctx, store.Version{Function: d.name, Hash: d.version, Manifest: mj}); err != nil {
		return err
	}
	return m.reg.SetActive(ctx, d.name, d.version)
}

// retire drains a superseded deployment (in-flight requests finish, queued
// ones move to the current version), stops it, and collects the versions it
// kept from collection. It holds no lock while draining.
func (m *Manager) retire(d *deployment) {
	d.drainAndStop()
	unlock := m.names.lock(d.name)
	defer unlock()
	m.collectVersionsLocked(context.WithoutCancel(m.ctx), d.name)
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
	return filepath.Join(m.versionsRoot(name), strings.TrimPrefix(hash, "sha256:")[:32])
}

// versionsRoot is the directory holding every stored version of name.
func (m *Manager) versionsRoot(name string) string {
	return filepath.Join(m.cfg.StateDir, "versions", name)
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
	m.sweepRemoved()
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
		d := m.newDeployment(r.Name, r.Active.Hash, &man, codeDir, uid)
		m.mu.Lock()
		m.fns[r.Name] = d
		m.mu.Unlock()
		m.goTracked(func() {
			if err := d.start(m.ctx); err != nil && !errors.Is(err, errRetired) {
				m.log.Error("restoring function", "function", d.name, "err", err)
				d.superviseAfterFailure(err)
			}
		})
	}
	return nil
}

// Remove stops a function's runtime and deletes it, its versions and its
// logs, including version directories a failed deploy of an older daemon
// left behind for a name that was never active. errdefs.ErrNotFound if
// there is nothing of that name. Requests in flight finish first (at most
// the function's timeout_ms + 5 s), then the runtime is drained and
// stopped, after the name's lock is released: a slow drain or stop delays
// only this call.
func (m *Manager) Remove(ctx context.Context, name string) error {
	unlock := m.names.lock(name)
	err := m.reg.DeleteFunction(ctx, name)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		unlock()
		return err
	}
	m.mu.Lock()
	d := m.fns[name]
	delete(m.fns, name)
	m.mu.Unlock()
	if d != nil {
		d.halt() // no request starts on it from here
	}
	trash, moved := m.detachVersions(name)
	unlock()
	if d != nil {
		// Requests in flight finish first, as on a redeploy (bounded by the
		// longest timeout_ms + 5 s); the name is free meanwhile.
		d.drainAndStop()
	}
	if m.limiter != nil {
		if err := m.limiter.DropPooled(name); err != nil {
			m.log.Warn("deleting the function's kept request cgroups", "function", name, "err", err)
		}
	}
	if moved {
		if rmErr := os.RemoveAll(trash); rmErr != nil {
			m.log.Warn("removing versions", "function", name, "err", rmErr)
		}
	}
	if err != nil && d == nil && !moved {
		return err
	}
	// Its zygotes are stopped and its code is gone: nothing runs as or
	// belongs to its uid any more (and the allocator skips an id while any
	// host process still runs as it).
	if m.cfg.HostIDs != nil {
		if err := m.cfg.HostIDs.Release(ctx, hostIDOwner(name)); err != nil {
			m.log.Warn("releasing the function's uid", "function", name, "err", err)
		}
	}
	m.cfg.Metrics.Forget(name)
	return nil
}

// Shutdown stops every runtime (in-flight requests fail), cancels the
// Manager's context (restarts and back-offs end) and waits for every
// goroutine the Manager started. Later calls do nothing.
func (m *Manager) Shutdown() { m.shutdown.Do(m.doShutdown) }

func (m *Manager) doShutdown() {
	m.cancel()
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
	m.wgMu.Lock()
	m.shut = true
	m.wgMu.Unlock()
	m.wg.Wait()
	m.logs.close()
}

// Status is one function as `zygo ls` shows it.
type Status struct {
	Name      string  `json:"name"`
	Version   string  `json:"version"`
	Runtime   Runtime `json:"runtime"`
	Mode      Mode    `json:"mode"`
	State     string  `json:"state"` // deploying, starting, ready, restarting, failed
	Fallback  string  `json:"fallback,omitempty"`
	ZygotePID int     `json:"zygote_pid,omitempty"` // host pid
	InFlight  int     `json:"in_flight"`
	// Queued counts requests waiting for a concurrency slot (at most the
	// manifest's queue).
	Queued int `json:"queued"`
	// Deploying is the version a deploy or rollback is starting in place of
	// this one ("" when none; a first deploy is State "deploying" instead).
	Deploying string `json:"deploying,omitempty"`
	// IdleWorkers counts ready Node workers (runtime "node" only).
	IdleWorkers int       `json:"idle_workers,omitempty"`
	Served      int64     `json:"served"`
	Manifest    *Manifest `json:"manifest"`
	// idleChildren counts the zygote's pre-forked children waiting (MetricSamples).
	idleChildren int
}

// statusOf is d's status with the version being deployed in its place,
// if any.
func (m *Manager) statusOf(d *deployment) Status {
	s := d.status()
	m.mu.Lock()
	if v := m.pending[d.name]; v != d.version {
		s.Deploying = v
	}
	m.mu.Unlock()
	return s
}

// StateDeploying is the Status.State of a function whose first version is
// still starting (its import and warm-up): invokes wait for it.
const StateDeploying = "deploying"

// Queued returns how many requests wait for a concurrency slot of
// function name's active version; 0 for an unknown function.
func (m *Manager) Queued(name string) int {
	if d := m.get(name); d != nil {
		return int(d.queued.Load())
	}
	return 0
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
		out = append(out, m.statusOf(d))
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
	return m.statusOf(d), nil
}

func (m *Manager) appendLogs(_ context.Context, lines []store.LogLine) {
	m.logs.append(lines)
}

// FlushLogs returns once every log line produced before the call is stored
// (or ctx ends): the logs API calls it so a caller sees its request's lines.
func (m *Manager) FlushLogs(ctx context.Context) { m.logs.Flush(ctx) }

// newID returns prefix-<unix ms hex>-<6 random bytes hex>: unique,
// roughly time-ordered, not a capability.
func newID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	out := make([]byte, 0, 40)
	out = append(append(out, prefix...), '-')
	out = append(strconv.AppendInt(out, time.Now().UnixMilli(), 16), '-')
	return string(hex.AppendEncode(out, b[:]))
}

func preFork(m *Manifest) int {
	if m.PreFork == nil {
		return 0
	}
	return *m.PreFork
}
