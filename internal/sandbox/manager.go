package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox/cleanup"
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
}

// ManagerConfig configures a Manager. Zero fields take the defaults in brackets.
type ManagerConfig struct {
	Backend  Backend  // required
	Registry Registry // required
	// ImageDir holds one directory per checkpoint image; created if missing. Required.
	ImageDir string
	Log      *slog.Logger
	// ReadyTimeout bounds one engine step that waits for the guest: create, restore, attach,
	// reseal [60s].
	ReadyTimeout time.Duration
	// MaxForkN lowers the fork bound [MaxForkN].
	MaxForkN int
	// Reseal is the reseal hook run on every restored copy before it is Running [DefaultReseal].
	Reseal ResealFunc
	// Secrets reads the current values of the secrets a sandbox names (CreateOptions.Secrets),
	// at create and at every reseal. nil: no sandbox may name secrets (Create refuses them).
	Secrets SecretsFunc
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Manager drives sandboxes through their lifecycle (see the package doc) and keeps their
// records in the Registry. Safe for concurrent use. Sandboxes outlive the Manager: a new one
// on the same Registry and backend state adopts them with Recover.
type Manager struct {
	cfg  ManagerConfig
	be   Backend
	ckpt Checkpointer // nil when the backend cannot checkpoint
	reg  Registry
	log  *slog.Logger

	mu   sync.Mutex // guards live
	live map[string]*entry
}

// entry is a sandbox with a running engine instance.
type entry struct {
	// rw: exec, run-code and files hold it shared; checkpoint, rollback and rm hold it
	// exclusively, so they wait for calls in flight instead of cutting them off.
	rw sync.RWMutex

	mu   sync.Mutex // guards inst
	inst *Instance
}

func (e *entry) instance() *Instance {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.inst
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
	if err := os.MkdirAll(cfg.ImageDir, 0o700); err != nil {
		return nil, fmt.Errorf("making image dir: %w", err)
	}
	m := &Manager{cfg: cfg, be: cfg.Backend, reg: cfg.Registry, log: cfg.Log, live: map[string]*entry{}}
	m.ckpt, _ = cfg.Backend.(Checkpointer)
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
// errdefs.ErrNotFound.
func (m *Manager) Get(ctx context.Context, idOrName string) (SandboxRecord, error) {
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

// List returns every sandbox record, oldest first.
func (m *Manager) List(ctx context.Context) ([]SandboxRecord, error) { return m.reg.ListSandboxes(ctx) }

// Generation returns the sandbox's current generation token (32 hex digits).
func (m *Manager) Generation(ctx context.Context, idOrName string) (string, error) {
	rec, err := m.Get(ctx, idOrName)
	return rec.Generation, err
}

// Create starts a new sandbox and returns its record once the guest answers. On error
// nothing is left: no record, no engine instance. A bad RootfsDir (relative, missing, not a
// directory, empty) is refused with errdefs.ErrInvalidArgument before anything is made.
func (m *Manager) Create(ctx context.Context, opts CreateOptions) (SandboxRecord, error) {
	if err := ValidateName(opts.Name); err != nil {
		return SandboxRecord{}, err
	}
	if err := ValidateRootfs(opts.RootfsDir); err != nil {
		return SandboxRecord{}, err
	}
	secrets, err := m.createSecrets(ctx, opts.Secrets)
	if err != nil {
		return SandboxRecord{}, err
	}
	now := m.cfg.Now()
	rec := SandboxRecord{ID: newID("sb-", 8), Backend: m.be.Name(), State: Creating, Token: newToken(),
		Generation: newGeneration(), Options: opts, CreatedAt: now, UpdatedAt: now}
	rec.Name = opts.Name
	if rec.Name == "" {
		rec.Name = rec.ID
	}
	rec.EngineID = newEngineID(rec.ID)
	if err := m.reg.PutSandbox(ctx, rec); err != nil {
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
	engineID := rec.EngineID
	undo.Add(func(ctx context.Context) error { return m.be.Destroy(ctx, engineID) }) // a half-made instance too
	boot := guest.Boot{Token: rec.Token, Services: opts.Services, Env: opts.Env, MachineID: newID("", 16), Identity: guest.Identity{
		SandboxID: rec.ID, Generation: rec.Generation, Hostname: rec.EngineID, ResumedAt: now}}
	spec := Spec{ID: rec.EngineID, Hostname: rec.EngineID, RootfsDir: opts.RootfsDir, Boot: boot, Token: rec.Token}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	defer cancel()
	inst, err := m.be.Create(cctx, spec)
	if err != nil {
		return SandboxRecord{}, fmt.Errorf("creating sandbox %s: %w", rec.ID, err)
	}
	if inst.ID != engineID {
		instID := inst.ID
		undo.Add(func(ctx context.Context) error { return m.be.Destroy(ctx, instID) })
	}
	if len(secrets) > 0 {
		if err := inst.Guest.WriteSecrets(cctx, secrets); err != nil {
			return SandboxRecord{}, fmt.Errorf("writing the secrets of sandbox %s: %w", rec.ID, err)
		}
	}
	if err := m.setState(ctx, &rec, Running, nil); err != nil {
		return SandboxRecord{}, err
	}
	undo.Release()
	m.addLive(rec.ID, inst)
	m.log.Info("created sandbox", "sandbox_id", rec.ID, "generation", rec.Generation, "secrets", len(secrets))
	return rec, nil
}

// ValidateRootfs checks a CreateOptions.RootfsDir: empty (the default root) or an absolute
// path to an existing, non-empty directory. It returns an error wrapping
// errdefs.ErrInvalidArgument that names the path.
// nameRE is what a sandbox name may look like: it is used on command lines
// and in tables, so no spaces, slashes, control characters or leading dash.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// ValidateName returns an error wrapping errdefs.ErrInvalidArgument for a
// name that is not empty and not 1-63 of [A-Za-z0-9_.-] starting with a
// letter or digit, or that looks like a sandbox id ("sb-…"), which would
// make it unreachable by name.
func ValidateName(name string) error {
	if name == "" {
		return nil
	}
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: sandbox name %q must be 1-63 of [A-Za-z0-9_.-], starting with a letter or digit",
			errdefs.ErrInvalidArgument, name)
	}
	if strings.HasPrefix(name, "sb-") {
		return fmt.Errorf("%w: sandbox name %q may not start with \"sb-\" (that is how ids look)", errdefs.ErrInvalidArgument, name)
	}
	return nil
}

func ValidateRootfs(dir string) error {
	if dir == "" {
		return nil
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("rootfs %q: must be an absolute path: %w", dir, errdefs.ErrInvalidArgument)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("rootfs %q: %v: %w", dir, err, errdefs.ErrInvalidArgument)
	}
	if !fi.IsDir() {
		return fmt.Errorf("rootfs %q: not a directory: %w", dir, errdefs.ErrInvalidArgument)
	}
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("rootfs %q: %v: %w", dir, err, errdefs.ErrInvalidArgument)
	}
	defer f.Close()
	if names, _ := f.Readdirnames(1); len(names) == 0 {
		return fmt.Errorf("rootfs %q: directory is empty: %w", dir, errdefs.ErrInvalidArgument)
	}
	return nil
}

func (m *Manager) addLive(id string, inst *Instance) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live[id] = &entry{inst: inst}
}

// lockCtx takes l (exclusively, or shared when shared is set), polling until ctx ends.
func lockCtx(ctx context.Context, l *sync.RWMutex, shared bool) error {
	try := l.TryLock
	if shared {
		try = l.TryRLock
	}
	for !try() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the sandbox's calls in flight: %w (%w)", errdefs.ErrFailedPrecondition, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// acquire resolves idOrName to a running sandbox and takes its lock; release it with
// e.rw.Unlock or RUnlock. It returns an error wrapping errdefs.ErrNotFound for an unknown
// sandbox and errdefs.ErrFailedPrecondition for one that is not Running.
func (m *Manager) acquire(ctx context.Context, idOrName string, shared bool) (SandboxRecord, *entry, error) {
	rec, err := m.Get(ctx, idOrName)
	if err != nil {
		return rec, nil, err
	}
	m.mu.Lock()
	e := m.live[rec.ID]
	m.mu.Unlock()
	if e == nil {
		return rec, nil, fmt.Errorf("sandbox %s is %s (%s): %w", rec.ID, rec.State, rec.Error, errdefs.ErrFailedPrecondition)
	}
	if err := lockCtx(ctx, &e.rw, shared); err != nil {
		return rec, nil, err
	}
	// Re-read: the state may have moved while we waited.
	if rec, err = m.reg.GetSandbox(ctx, rec.ID); err == nil && rec.State != Running {
		err = fmt.Errorf("sandbox %s is %s: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	if err != nil {
		if shared {
			e.rw.RUnlock()
		} else {
			e.rw.Unlock()
		}
		return rec, nil, err
	}
	return rec, e, nil
}

// withGuest runs fn with the guest of a Running sandbox, holding its lock shared.
func (m *Manager) withGuest(ctx context.Context, idOrName string, fn func(*guest.Client) error) error {
	_, e, err := m.acquire(ctx, idOrName, true)
	if err != nil {
		return err
	}
	defer e.rw.RUnlock()
	return fn(e.instance().Guest)
}

// Exec runs a command in the sandbox, streaming its output to stdout and stderr (either may
// be nil). A command that cannot start returns an error (errdefs.ErrNotFound for a missing
// binary), not an exit status.
func (m *Manager) Exec(ctx context.Context, idOrName string, req guest.ExecRequest, stdout, stderr io.Writer) (guest.ExitStatus, error) {
	if len(req.Argv) == 0 {
		return guest.ExitStatus{}, fmt.Errorf("exec needs a command: %w", errdefs.ErrInvalidArgument)
	}
	var st guest.ExitStatus
	err := m.withGuest(ctx, idOrName, func(c *guest.Client) (err error) {
		st, err = c.Exec(ctx, req, stdout, stderr)
		return err
	})
	return st, err
}

// RunCode runs Python in the sandbox's persistent interpreter. A Python exception is a result
// with OK false, not an error.
func (m *Manager) RunCode(ctx context.Context, idOrName string, req guest.CodeRequest, stdout, stderr io.Writer) (guest.CodeResult, error) {
	var res guest.CodeResult
	err := m.withGuest(ctx, idOrName, func(c *guest.Client) (err error) {
		res, err = c.RunCode(ctx, req, stdout, stderr)
		return err
	})
	return res, err
}

// PutFile writes r to the absolute path inside the sandbox with permission bits perm.
func (m *Manager) PutFile(ctx context.Context, idOrName, path string, perm uint32, r io.Reader) error {
	return m.withGuest(ctx, idOrName, func(c *guest.Client) error { return c.PutFile(ctx, path, perm, r) })
}

// GetFile copies the file at path inside the sandbox to w; errdefs.ErrNotFound if missing.
func (m *Manager) GetFile(ctx context.Context, idOrName, path string, w io.Writer) error {
	return m.withGuest(ctx, idOrName, func(c *guest.Client) error { return c.GetFile(ctx, path, w) })
}

// ListFiles lists the directory at path inside the sandbox.
func (m *Manager) ListFiles(ctx context.Context, idOrName, path string) ([]guest.FileInfo, error) {
	var out []guest.FileInfo
	err := m.withGuest(ctx, idOrName, func(c *guest.Client) (err error) {
		out, err = c.ListFiles(ctx, path)
		return err
	})
	return out, err
}

// Remove destroys the sandbox's engine instance and deletes its record; its checkpoints stay.
// It waits for calls in flight. It returns an error wrapping errdefs.ErrNotFound for an
// unknown sandbox; when the engine cannot be cleaned up the record stays, Failed.
func (m *Manager) Remove(ctx context.Context, idOrName string) error {
	rec, err := m.Get(ctx, idOrName)
	if err != nil {
		return err
	}
	m.mu.Lock()
	e := m.live[rec.ID]
	m.mu.Unlock()
	if e != nil {
		if err := lockCtx(ctx, &e.rw, false); err != nil {
			return err
		}
		defer e.rw.Unlock()
		if rec, err = m.reg.GetSandbox(ctx, rec.ID); err != nil {
			return err
		}
	}
	if err := m.setState(ctx, &rec, Removing, nil); err != nil {
		return err
	}
	if err := m.be.Destroy(ctx, rec.EngineID); err != nil {
		_ = m.setState(context.WithoutCancel(ctx), &rec, Failed, fmt.Errorf("removing: %w", err))
		return fmt.Errorf("destroying sandbox %s: %w", rec.ID, err)
	}
	m.mu.Lock()
	delete(m.live, rec.ID)
	m.mu.Unlock()
	if err := m.reg.DeleteSandbox(ctx, rec.ID); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("deleting sandbox record %s: %w", rec.ID, err)
	}
	m.log.Info("removed sandbox", "sandbox_id", rec.ID)
	return nil
}

// Close forgets the live sandboxes without stopping them (they survive a daemon restart) and
// closes the backend's host-side resources when it has a Close method.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.live = map[string]*entry{}
	m.mu.Unlock()
	if c, ok := m.be.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
