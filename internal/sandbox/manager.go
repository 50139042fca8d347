package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/cleanup"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
)

// MaxForkN is the upper bound on fork's N. Each child is a full gVisor sandbox (a Sentry, a
// gofer and the restored memory) and restores run in parallel: on the 2-core hosts this was
// measured on, 16 already takes seconds. ManagerConfig.MaxForkN may lower it, never raise it.
const MaxForkN = 16

// CreateOptions are what a user chooses at create; forks and rollbacks inherit them.
type CreateOptions struct {
	Name      string          `json:"name,omitempty"`       // unique; default the id
	RootfsDir string          `json:"rootfs_dir,omitempty"` // see Spec.RootfsDir
	Services  []guest.Service `json:"services,omitempty"`
	Env       []string        `json:"env,omitempty"` // default environment inside
	// Secrets names secrets of the daemon's store. Their values are written to
	// /run/secrets/NAME (mode 0400) at create and, with the then current values, in every
	// restored copy (reseal). Names only: a value never enters a record.
	Secrets []string `json:"secrets,omitempty"`
	// MemoryMiB is the sandbox's memory limit in MiB (processes, files in its in-memory root
	// and gVisor's kernel together); 0 at create means DefaultMemoryMiB. See Limits.
	MemoryMiB int `json:"memory_mib,omitempty"`
	// PIDs is the most processes and threads alive at once inside; 0 at create means
	// DefaultPIDs.
	PIDs int `json:"pids,omitempty"`
	// CPUs is a CPU quota in cores (fractions allowed); 0 means none.
	CPUs float64 `json:"cpus,omitempty"`
	// Network is the sandbox's network; forks and rollbacks keep it, each copy with an
	// address and MAC of its own.
	Network NetworkOptions `json:"network,omitempty"`
	// Lifecycle is when the sandbox ends by itself (a timeout) and how; zero: never.
	// Kept per sandbox: a fork child or a restored copy gets its own (lifecycle.go).
	Lifecycle Lifecycle `json:"lifecycle,omitzero"`
	// Template is the name of the template the sandbox was made from ("" for none: the
	// default root or RootfsDir as given); for listings and the E2B API's templateID.
	Template string `json:"template,omitempty"`
	// Metadata is the caller's labels (E2B's metadata): at most MaxMetadata pairs, kept and
	// listed, never interpreted. Copies inherit it.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// ManagerConfig configures a Manager. Zero fields take the defaults in brackets.
type ManagerConfig struct {
	// Backend is the engine new sandboxes are created on. Required.
	Backend Backend
	// Backends are further engines, of other names, whose sandboxes and checkpoints the
	// Manager also serves (records name their backend); a checkpoint is only ever restored by
	// the backend that wrote it. Usually none.
	Backends []Backend
	Registry Registry // required
	// ImageDir holds one directory per checkpoint image; created if missing. Required.
	ImageDir string
	// SecretImageDir holds instead the images of sandboxes that hold secrets
	// (CreateOptions.Secrets): a sandbox's memory, secrets included, is in its image. It must
	// be on a memory filesystem (tmpfs or ramfs), which NewManager and every checkpoint check.
	// Empty: such sandboxes cannot be checkpointed (errdefs.ErrFailedPrecondition).
	SecretImageDir string
	// ProtectedDirs are directories a sandbox's RootfsDir may neither contain nor lie inside
	// (the daemon's state dir: its secret key, database, images, other sandboxes' sockets);
	// ImageDir always is one.
	ProtectedDirs []string
	Log           *slog.Logger
	// ReadyTimeout bounds one engine step that waits for the guest: create, checkpoint (the
	// image written and the guest back), restore, attach,
	// reseal [60s].
	ReadyTimeout time.Duration
	// MaxForkN lowers the fork bound [MaxForkN].
	MaxForkN int
	// Reseal is the reseal hook run on every restored copy before it is Running [DefaultReseal].
	Reseal ResealFunc
	// Secrets reads the current values of the secrets a sandbox names (CreateOptions.Secrets),
	// at create and at every reseal. nil: no sandbox may name secrets (Create refuses them).
	Secrets SecretsFunc
	// BusyWait is how long checkpoint and rollback wait for the sandbox's calls in flight
	// (exec, run-code, files) before failing with errdefs.ErrFailedPrecondition; new calls
	// wait behind them meanwhile [10s]. rm never waits: it ends the calls in flight.
	BusyWait time.Duration
	// RecoverWorkers bounds how many sandboxes StartRecover re-attaches at once [8].
	RecoverWorkers int
	// MaxImportBytes bounds the tar stream of one ImportCheckpoint, in bytes
	// [DefaultMaxImportBytes].
	MaxImportBytes int64
	// Now is the clock [time.Now].
	Now func() time.Time
	// HostIDs hands each sandbox its own host uid (Spec.HostUID), owner "sandbox:ID": a fork
	// child gets its own, a rollback keeps its sandbox's, Remove gives it back. nil: every
	// instance runs as the engine's default.
	HostIDs HostIDs
	// Templates are the templates besides BaseTemplate (CreateOptions.Template).
	Templates []Template
	// Network gives each engine instance with network (CreateOptions.Network) an endpoint of
	// its own: a fork child and a rollback get a new address and MAC. nil: sandboxes run
	// without network, and asking for it is errdefs.ErrFailedPrecondition.
	Network Networker
}

// Manager drives sandboxes through their lifecycle (see the package doc) and keeps their
// records in the Registry. Safe for concurrent use. Sandboxes outlive the Manager: a new one
// on the same Registry and backend state adopts them with Recover.
type Manager struct {
	cfg ManagerConfig
	bes backends // by name; bes.def is ManagerConfig.Backend
	reg Registry
	log *slog.Logger

	// ctx ends (cause errClosed) when the Manager is closed: every entry's ctx, watch and
	// recovery worker derives from it; wg counts those goroutines.
	ctx  context.Context
	stop context.CancelCauseFunc
	wg   sync.WaitGroup

	mu         sync.Mutex // guards live and recovering
	live       map[string]*entry
	recovering map[string]chan struct{} // sandbox id → closed when its recovery is done

	ckMu       sync.Mutex              // guards ckLeases and ckRemoving (lease.go); never held across I/O
	ckLeases   map[string]*leaseCounts // checkpoint id → the calls reading its image, by kind
	ckRemoving map[string]bool         // checkpoint ids a RemoveCheckpoint is removing
	// removeImage deletes a checkpoint's image dir [os.RemoveAll]; tests replace it.
	removeImage func(dir string) error

	netMu sync.Mutex             // guards nets; never held across I/O
	nets  map[string]NetEndpoint // engine id → its endpoint, closed by destroyEngine

	portMu sync.Mutex // guards ports; held while a listener is made, never across a connection
	ports  map[portKey]*portProxy

	// recMu serializes SetTimeout's read-modify-write of a record.
	recMu sync.Mutex
	// resumeMu guards resuming: the ids of paused sandboxes a Resume is restoring (they have
	// no live entry to serialize on), each with a channel closed when that Resume returns.
	resumeMu sync.Mutex
	resuming map[string]chan struct{}
}

// NewManager returns a Manager. It starts nothing; call Recover to adopt sandboxes left by an
// earlier process. It returns an error wrapping errdefs.ErrInvalidArgument for a bad config.
func NewManager(cfg ManagerConfig) (*Manager, error) {
	if cfg.Backend == nil || cfg.Registry == nil || cfg.ImageDir == "" {
		return nil, fmt.Errorf("manager needs a backend, a registry and an image dir: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 60 * time.Second
	}
	if cfg.MaxForkN <= 0 || cfg.MaxForkN > MaxForkN {
		cfg.MaxForkN = MaxForkN
	}
	if cfg.Reseal == nil {
		cfg.Reseal = DefaultReseal
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.BusyWait <= 0 {
		cfg.BusyWait = 10 * time.Second
	}
	if cfg.RecoverWorkers <= 0 {
		cfg.RecoverWorkers = 8
	}
	if cfg.MaxImportBytes <= 0 {
		cfg.MaxImportBytes = DefaultMaxImportBytes
	}
	if err := os.MkdirAll(cfg.ImageDir, 0o700); err != nil {
		return nil, fmt.Errorf("making image dir: %w", err)
	}
	if cfg.SecretImageDir != "" {
		if err := checkMemoryFS(cfg.SecretImageDir); err != nil {
			return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
		}
	}
	bes, err := newBackends(cfg.Backend, cfg.Backends)
	if err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, bes: bes, reg: cfg.Registry, log: cfg.Log, live: map[string]*entry{},
		recovering: map[string]chan struct{}{}, ckLeases: map[string]*leaseCounts{}, ckRemoving: map[string]bool{},
		removeImage: os.RemoveAll, nets: map[string]NetEndpoint{}, ports: map[portKey]*portProxy{},
		resuming: map[string]chan struct{}{}}
	m.ctx, m.stop = context.WithCancelCause(context.Background())
	return m, nil
}

// MaxFork returns the bound on fork's N in force.
func (m *Manager) MaxFork() int { return m.cfg.MaxForkN }

func newID(prefix string, nbytes int) string {
	b := make([]byte, nbytes)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// newEngineID names one engine incarnation of sandbox id.
func newEngineID(id string) string { return newID(id+"-", 3) }

// newToken returns a guest token: 256 random bits, hex.
func newToken() string { return newID("", 32) }

// newGeneration returns a generation token: 128 random bits, 32 hex digits.
func newGeneration() string { return newID("", 16) }

// setState moves rec to state `to` and persists it. On error rec is unchanged.
func (m *Manager) setState(ctx context.Context, rec *SandboxRecord, to State, cause error) error {
	if err := transition(rec.ID, rec.State, to); err != nil {
		return err
	}
	next := *rec
	next.State, next.UpdatedAt = to, m.cfg.Now()
	next.Error = ""
	if cause != nil {
		next.Error = cause.Error()
	}
	if err := m.reg.PutSandbox(ctx, next); err != nil {
		return fmt.Errorf("saving sandbox %s: %w", rec.ID, err)
	}
	*rec = next
	return nil
}

// Get returns the record of the sandbox with that id or name, or an error wrapping
// errdefs.ErrNotFound. A sandbox not re-attached yet after a daemon restart shows as
// Recovering.
func (m *Manager) Get(ctx context.Context, idOrName string) (SandboxRecord, error) {
	rec, err := m.get(ctx, idOrName)
	if err == nil && m.isRecovering(rec.ID) {
		rec.State = Recovering
	}
	return rec, err
}

// get is Get as stored, without the Recovering overlay.
func (m *Manager) get(ctx context.Context, idOrName string) (SandboxRecord, error) {
	if err := validateSandboxRef(idOrName); err != nil {
		return SandboxRecord{}, err
	}
	rec, err := m.reg.GetSandbox(ctx, idOrName)
	if err == nil || !errdefs.IsNotFound(err) {
		return rec, err
	}
	all, lerr := m.reg.ListSandboxes(ctx)
	if lerr != nil {
		return rec, fmt.Errorf("listing sandboxes: %w", lerr)
	}
	for _, r := range all {
		if r.Name == idOrName {
			return r, nil
		}
	}
	return rec, err
}

// List returns every sandbox record, oldest first; as Get, not yet re-attached ones show as
// Recovering.
func (m *Manager) List(ctx context.Context) ([]SandboxRecord, error) {
	recs, err := m.reg.ListSandboxes(ctx)
	for i := range recs {
		if m.isRecovering(recs[i].ID) {
			recs[i].State = Recovering
		}
	}
	return recs, err
}

// Generation returns the sandbox's current generation token (32 hex digits). A sandbox that is
// not Running has none to hand out (a fork child before its reseal is acknowledged, a rollback
// in progress, a recovering or dead one): that is an error wrapping
// errdefs.ErrFailedPrecondition naming the state, never a token another copy may hold.
func (m *Manager) Generation(ctx context.Context, idOrName string) (string, error) {
	rec, err := m.Get(ctx, idOrName)
	if err != nil {
		return "", err
	}
	if rec.State != Running {
		return "", fmt.Errorf("sandbox %s is %s: its generation is issued when it runs: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	return rec.Generation, nil
}

// Create starts a new sandbox and returns its record once the guest answers. On error
// nothing is left: no record, no engine instance. A bad RootfsDir (relative, missing, not a
// directory, empty), a bad service (guest.ValidateServices: an unknown on_fork or restart
// policy, a duplicate name, no argv) or a limit out of bounds (ValidateLimits) is refused
// with errdefs.ErrInvalidArgument before anything is made. Limits left 0 get their defaults
// (WithDefaults), and the record keeps the values in force, which every copy inherits.
func (m *Manager) Create(ctx context.Context, opts CreateOptions) (SandboxRecord, error) {
	if err := validateCreate(opts); err != nil {
		return SandboxRecord{}, err
	}
	var tmpl Template
	if opts.Template != "" {
		if opts.RootfsDir != "" {
			return SandboxRecord{}, invalid("template", "%s: give a template or rootfs_dir, not both", short(opts.Template))
		}
		var err error
		if tmpl, err = m.template(opts.Template); err != nil {
			return SandboxRecord{}, err
		}
		opts.RootfsDir = tmpl.RootfsDir
	}
	opts = opts.WithDefaults()
	var err error
	if opts.Network, err = m.networkDefaults(opts.Network); err != nil {
		return SandboxRecord{}, err
	}
	// The daemon's directories first: nothing about what is in them (missing, empty) may be
	// told to the caller.
	if err := rootfsClearOf(opts.RootfsDir, append([]string{m.cfg.ImageDir, m.cfg.SecretImageDir}, m.cfg.ProtectedDirs...)); err != nil {
		return SandboxRecord{}, err
	}
	if err := ValidateRootfs(opts.RootfsDir); err != nil {
		return SandboxRecord{}, err
	}
	if err := m.rootfsReachable(opts.RootfsDir); err != nil {
		return SandboxRecord{}, err
	}
	secrets, err := m.createSecrets(ctx, opts.Secrets)
	if err != nil {
		return SandboxRecord{}, err
	}
	now := m.cfg.Now()
	be := m.bes.def
	rec := SandboxRecord{ID: newID("sb-", 8), Backend: be.Name(), State: Creating, Token: newToken(),
		Generation: newGeneration(), Options: opts, CreatedAt: now, UpdatedAt: now}
	rec.Name = opts.Name
	if rec.Name == "" {
		rec.Name = rec.ID
	}
	rec.EngineID = newEngineID(rec.ID)
	if err := m.reg.PutSandbox(ctx, rec); err != nil {
		if errdefs.IsExists(err) { // the caller's name clash, said whole by the registry
			return SandboxRecord{}, err
		}
		return SandboxRecord{}, fmt.Errorf("saving sandbox: %w", err)
	}
	// Undo by construction: every step below pushes its undo and the stack runs on any exit
	// (error return or panic) unless released at the very end. The undos capture their own
	// copies of the ids, never a variable a return statement may overwrite.
	var undo cleanup.Stack
	defer func() {
		if uerr := undo.Run(ctx, 0); uerr != nil {
			m.log.Error("cleaning up failed create", "sandbox_id", rec.ID, "err", uerr)
		}
	}()
	id := rec.ID
	undo.Add(func(ctx context.Context) error {
		if err := m.reg.DeleteSandbox(ctx, id); err != nil && !errdefs.IsNotFound(err) {
			return err
		}
		return nil
	})
	uid, err := m.hostUID(ctx, id)
	if err != nil {
		return SandboxRecord{}, err
	}
	undo.Add(func(ctx context.Context) error { return m.releaseHostUID(ctx, id) }) // after the Destroy below
	engineID := rec.EngineID
	undo.Add(func(ctx context.Context) error { return m.destroyEngine(ctx, be, engineID) }) // a half-made instance too
	netAt, netID, err := m.attachNet(ctx, engineID, opts.Network)
	if err != nil {
		return SandboxRecord{}, err
	}
	rec.Net = netID
	boot := guest.Boot{Token: rec.Token, Services: opts.Services, Env: opts.Env, MachineID: newID("", 16), Identity: guest.Identity{
		SandboxID: rec.ID, Generation: rec.Generation, Hostname: rec.EngineID, ResumedAt: now}}
	spec := Spec{ID: rec.EngineID, Hostname: rec.EngineID, RootfsDir: opts.RootfsDir, Boot: boot, Token: rec.Token,
		Limits: opts.Limits(), HostUID: uid, Net: netAt}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	defer cancel()
	inst, err := be.Create(cctx, spec)
	if err != nil {
		return SandboxRecord{}, fmt.Errorf("creating sandbox %s: %w", rec.ID, err)
	}
	if inst.ID != engineID {
		instID := inst.ID
		undo.Add(func(ctx context.Context) error { return m.destroyEngine(ctx, be, instID) })
	}
	if len(secrets) > 0 {
		if err := inst.Guest.WriteSecrets(cctx, secrets); err != nil {
			return SandboxRecord{}, fmt.Errorf("writing the secrets of sandbox %s: %w", rec.ID, err)
		}
	}
	if err := runSetup(cctx, inst.Guest, tmpl); err != nil {
		return SandboxRecord{}, fmt.Errorf("creating sandbox %s: %w", rec.ID, err)
	}
	rec.Options.Lifecycle = opts.Lifecycle.started(m.cfg.Now())
	if err := m.setState(ctx, &rec, Running, nil); err != nil {
		return SandboxRecord{}, err
	}
	undo.Release()
	m.addLive(rec.ID, be, inst)
	m.log.Info("created sandbox", "sandbox_id", rec.ID, "generation", rec.Generation, "secrets", len(secrets))
	return rec, nil
}

// nameRE is what a sandbox name may look like: it is used on command lines
// and in tables, so no spaces, slashes, control characters or leading dash.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// ValidateName returns an error wrapping errdefs.ErrInvalidArgument for a
// name that is not empty and not 1-63 of [A-Za-z0-9_.-] starting with a
// letter or digit, or that looks like a sandbox id ("sb-…"), which would
// make it unreachable by name.
// maxNameLen is the longest sandbox name, in bytes (ValidateName).
const maxNameLen = 63

func ValidateName(name string) error {
	if name == "" {
		return nil
	}
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: name: sandbox name %q must be 1-63 of [A-Za-z0-9_.-], starting with a letter or digit",
			errdefs.ErrInvalidArgument, name)
	}
	if strings.HasPrefix(name, "sb-") {
		return fmt.Errorf("%w: name: sandbox name %q may not start with \"sb-\" (that is how ids look)", errdefs.ErrInvalidArgument, name)
	}
	return nil
}

// ValidateRootfs checks a CreateOptions.RootfsDir: empty (the default root) or an absolute
// path to an existing, non-empty directory. It returns an error wrapping
// errdefs.ErrInvalidArgument that names the path.
func ValidateRootfs(dir string) error {
	if dir == "" {
		return nil
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("rootfs_dir %q: must be an absolute path: %w", dir, errdefs.ErrInvalidArgument)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("rootfs_dir %q: %s: %w", dir, errnoText(err), errdefs.ErrInvalidArgument)
	}
	if !fi.IsDir() {
		return fmt.Errorf("rootfs_dir %q: not a directory: %w", dir, errdefs.ErrInvalidArgument)
	}
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("rootfs_dir %q: %s: %w", dir, errnoText(err), errdefs.ErrInvalidArgument)
	}
	defer f.Close()
	if names, _ := f.Readdirnames(1); len(names) == 0 {
		return fmt.Errorf("rootfs_dir %q: directory is empty: %w", dir, errdefs.ErrInvalidArgument)
	}
	return nil
}

// rootfsClearOf refuses a rootfs that contains, is, or lies inside one of the protected
// directories (symlinks resolved): code in the sandbox could read what is there. It cannot see
// bind mounts placed inside the rootfs; docs/sandboxes.md says not to put host state there.
func rootfsClearOf(rootfs string, protected []string) error {
	if rootfs == "" {
		return nil
	}
	root, rerr := filepath.EvalSymlinks(rootfs)
	if rerr != nil {
		// Unresolvable: still refused as overlapping when it does so as written, so that a
		// missing path inside a protected directory reads the same as an existing one.
		root = filepath.Clean(rootfs)
	}
	for _, p := range protected {
		if p == "" {
			continue
		}
		pr, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue // not made yet: nothing to expose
		}
		if within(pr, root) || within(root, pr) || within(filepath.Clean(p), root) || within(root, filepath.Clean(p)) {
			// The daemon's directory is not named: its path is not the caller's to learn.
			return fmt.Errorf("rootfs_dir overlaps the daemon's state directory (a sandbox could read its keys, database and images): %w",
				errdefs.ErrInvalidArgument)
		}
	}
	if rerr != nil {
		return fmt.Errorf("rootfs_dir %q: %s: %w", rootfs, errnoText(rerr), errdefs.ErrInvalidArgument)
	}
	return nil
}

// within reports whether path is dir or lies below it (both cleaned, absolute).
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// withGuest runs fn with the guest of a Running sandbox as one shared call; fn must use the
// ctx it is given, which also ends when the sandbox is removed or dies.
func (m *Manager) withGuest(ctx context.Context, idOrName string, fn func(context.Context, Guest) error) error {
	c, err := m.begin(ctx, idOrName, true, 0)
	if err != nil {
		return err
	}
	return c.end(fn(c.ctx, c.e.instance().Guest))
}

// statusTimeout bounds a read of live state from the guest (Services).
const statusTimeout = 10 * time.Second

// Services returns the live state of the sandbox's declared services, as its guest agent
// reports them (running, pid, restarts, last exit, a pending restart), in declaration order.
// Errors are those of any call on the sandbox (ErrNotFound, a dead or busy sandbox), or
// context.DeadlineExceeded when the agent does not answer within 10 s.
func (m *Manager) Services(ctx context.Context, idOrName string) ([]guest.ServiceStatus, error) {
	// A status read must not hang on an agent that does not answer (stopped, wedged).
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	var out []guest.ServiceStatus
	err := m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) error {
		info, err := c.Info(ctx)
		out = info.Services
		return err
	})
	return out, err
}

// Exec runs a command in the sandbox, streaming its output to stdout and stderr (either may
// be nil). A command that cannot start returns an error (errdefs.ErrNotFound for a missing
// binary), not an exit status.
func (m *Manager) Exec(ctx context.Context, idOrName string, req guest.ExecRequest, stdout, stderr io.Writer) (guest.ExitStatus, error) {
	if err := ValidateExec(req); err != nil {
		return guest.ExitStatus{}, err
	}
	var st guest.ExitStatus
	err := m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) (err error) {
		st, err = c.Exec(ctx, req, stdout, stderr)
		return err
	})
	return st, err
}

// RunCode runs Python in the sandbox's persistent interpreter. A Python exception is a result
// with OK false, not an error.
func (m *Manager) RunCode(ctx context.Context, idOrName string, req guest.CodeRequest, stdout, stderr io.Writer) (guest.CodeResult, error) {
	if err := validateTimeout(req.Timeout); err != nil {
		return guest.CodeResult{}, err
	}
	var res guest.CodeResult
	err := m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) (err error) {
		res, err = c.RunCode(ctx, req, stdout, stderr)
		return err
	})
	return res, err
}

// PutFile writes r to the absolute path inside the sandbox with permission bits perm.
func (m *Manager) PutFile(ctx context.Context, idOrName, path string, perm uint32, r io.Reader) error {
	if err := ValidatePath("path", path); err != nil {
		return err
	}
	if perm > 0o7777 {
		return invalid("mode", "%o: want permission bits (at most 7777)", perm)
	}
	return m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) error { return c.PutFile(ctx, path, perm, r) })
}

// GetFile copies the file at path inside the sandbox to w; errdefs.ErrNotFound if missing.
func (m *Manager) GetFile(ctx context.Context, idOrName, path string, w io.Writer) error {
	if err := ValidatePath("path", path); err != nil {
		return err
	}
	return m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) error { return c.GetFile(ctx, path, w) })
}

// ListFiles lists the directory at path inside the sandbox: at most guest.MaxListEntries
// entries in name order, and the directory's total.
func (m *Manager) ListFiles(ctx context.Context, idOrName, path string) (guest.Listing, error) {
	if err := ValidatePath("path", path); err != nil {
		return guest.Listing{}, err
	}
	var out guest.Listing
	err := m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) (err error) {
		out, err = c.ListFiles(ctx, path)
		return err
	})
	return out, err
}

// removeUnwind bounds how long rm waits for the calls it ended to let go of the instance;
// whatever still runs after that ends when the engine is destroyed.
const removeUnwind = 5 * time.Second

// Remove destroys the sandbox's engine instance and deletes its record and its pause images
// (PauseTag) no other sandbox was restored from; its other checkpoints stay.
// It does not wait for calls in flight: it ends them (their callers get ErrRemoved) and
// removes at once. A sandbox still being recovered is waited for (bounded by ctx). It
// returns an error wrapping errdefs.ErrNotFound for an unknown sandbox; when the engine
// cannot be cleaned up the record stays, Failed.
func (m *Manager) Remove(ctx context.Context, idOrName string) error {
	rec, err := m.get(ctx, idOrName)
	if err != nil {
		return err
	}
	if err := m.waitRecovered(ctx, rec.ID); err != nil {
		return err
	}
	be, err := m.bes.named(rec.Backend) // before anything is touched: only its backend can destroy it
	if err != nil {
		return fmt.Errorf("removing sandbox %s: %w", rec.ID, err)
	}
	m.mu.Lock()
	e := m.live[rec.ID]
	m.mu.Unlock()
	if e == nil && (rec.State == Creating || rec.State == Restoring || rec.State == Resealing || rec.State == Resuming) {
		// Not live yet: the create, fork or resume making it owns it, and would mark it
		// running after us. It either hands it out or destroys it; remove it then.
		return fmt.Errorf("sandbox %s is %s (a create or fork is making it): remove it once that call has returned: %w",
			rec.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	if e != nil {
		e.cancel(fmt.Errorf("sandbox %s: %w", rec.ID, ErrRemoved))
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeUnwind)
		if e.gate.lock(wctx, false) == nil {
			defer e.gate.unlock(false)
		}
		cancel()
		m.dropLive(e)
		if rec, err = m.reg.GetSandbox(ctx, rec.ID); err != nil {
			return err
		}
	}
	if err := m.setState(ctx, &rec, Removing, nil); err != nil {
		return err
	}
	m.closePorts(rec.ID)
	if err := m.destroyEngine(ctx, be, rec.EngineID); err != nil {
		_ = m.setState(context.WithoutCancel(ctx), &rec, Failed, fmt.Errorf("removing: %w", err))
		return fmt.Errorf("destroying sandbox %s: %w", rec.ID, err)
	}
	if err := m.releaseHostUID(ctx, rec.ID); err != nil {
		return err
	}
	if err := m.reg.DeleteSandbox(ctx, rec.ID); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("deleting sandbox record %s: %w", rec.ID, err)
	}
	m.dropPauseImages(context.WithoutCancel(ctx), rec.ID, "")
	m.log.Info("removed sandbox", "sandbox_id", rec.ID)
	return nil
}

// Close ends the calls in flight (errdefs.ErrUnavailable), stops watching engines and any
// recovery still running, and forgets the live sandboxes without stopping them (they survive
// a daemon restart); then it closes the backend's host-side resources when it has a Close
// method. It returns once the Manager's goroutines have ended.
func (m *Manager) Close() error {
	m.stop(errClosed)
	m.closePorts("")
	m.wg.Wait()
	m.detachNets() // the instances outlive the Manager, in their endpoints
	m.mu.Lock()
	m.live = map[string]*entry{}
	m.mu.Unlock()
	var errs []error
	for _, b := range m.bes.byName {
		if c, ok := b.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}
