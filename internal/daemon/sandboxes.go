package daemon

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/zygo-run/zygo/internal/api"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/hostid"
	"github.com/zygo-run/zygo/internal/metrics"
	"github.com/zygo-run/zygo/internal/network"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/engine"
	"github.com/zygo-run/zygo/internal/secret"
	"github.com/zygo-run/zygo/internal/store"
)

// SandboxConfig configures the sandboxes. The zero value runs them on gVisor and finds runsc
// and zygo-guest by itself. When either is missing the daemon still serves functions and every /v1/sandboxes
// call answers 503 with the reason and how to fix it.
type SandboxConfig struct {
	// Disabled turns sandboxes off.
	Disabled bool
	// Backend names the engine new sandboxes run on, one of engine.Names() [engine.Default,
	// "gvisor"]. Sandboxes and checkpoints of another backend are refused (failed_precondition).
	Backend string
	// Runsc is the runsc binary [/usr/local/bin/runsc, else runsc on PATH].
	Runsc string
	// GuestBinary is the static zygo-guest that is PID 1 of every sandbox [zygo-guest next to
	// the running zygo executable (make build puts both in bin/), else zygo-guest on PATH].
	GuestBinary string
	// EngineDir holds runsc's state and one directory per engine instance [STATE/gv, or
	// /run/zygo/gv-HASH when that is longer than MaxEngineDir]. Checkpoint images are kept in
	// STATE/images whatever this is.
	EngineDir string
	// ReadyTimeout bounds each wait for a guest agent: create, restore, reseal, attach [60s].
	ReadyTimeout time.Duration
	// SecretImagesMiB caps the tmpfs STATE/images-mem that holds the checkpoint images of
	// sandboxes with secrets (secretimages.go) [2048].
	SecretImagesMiB int
	// CheckpointImportMaxMiB bounds one imported checkpoint image (POST /v1/checkpoints/import),
	// in MiB of its tar stream [sandbox.DefaultMaxImportBytes: 8192].
	CheckpointImportMaxMiB int
	// Network configures the sandboxes' network (sandboxnet.go).
	Network SandboxNetConfig
	// Templates are NAME=DIR templates besides the built-in base (sandbox.ParseTemplate).
	Templates []string
}

// MaxEngineDir is the longest engine state directory: the guest's socket is
// ENGINE/instances/<engine id, 26 bytes>/host/agent.sock and a unix socket path has at most 107
// bytes (108 with its NUL).
const MaxEngineDir = 107 - len("/instances/") - len("sb-0123456789abcdef-012345") - len("/host/agent.sock")

// sandboxes is the daemon's sandbox side: a Manager, or the reason there is none.
type sandboxes struct {
	mgr *sandbox.Manager
	be  engine.Engine
	reg *metrics.Registry // the daemon's metrics
	// memImages is the tmpfs of the images of sandboxes with secrets (secretimages.go).
	memImages string
	net       *network.Host // nil: sandboxes run without network
	err       error         // why sandboxes are unavailable; nil when mgr is set
	log       *slog.Logger
}

// openSandboxes builds the gVisor backend and the sandbox Manager on the store and starts
// adopting the sandboxes an earlier daemon left running (StartRecover) in the background: the
// API serves meanwhile, and a sandbox not re-attached yet shows as recovering and answers 503
// (retry). It never fails the daemon: a missing runsc or guest binary leaves sandboxes
// unavailable, with the reason logged and kept for the API's 503 answers.
func openSandboxes(ctx context.Context, cfg Config, st *store.Store, secrets *secret.Store, nh *network.Host, reg *metrics.Registry, log *slog.Logger) *sandboxes {
	s := &sandboxes{log: log, reg: reg}
	if nh != nil && !cfg.Sandbox.Network.Disabled {
		s.net = nh // the daemon's, closed by Run after the sandboxes
	} else {
		log.Info("sandbox network off (--no-sandbox-network, --no-network or not root): sandboxes get loopback only")
	}
	mgr, be, err := newSandboxManager(ctx, cfg, st, secrets, s.net, reg, log)
	if err != nil {
		s.err = fmt.Errorf("sandboxes are unavailable on this daemon: %w", err)
		log.Warn("sandboxes unavailable; functions are served as usual", "err", err)
		return s
	}
	t0 := time.Now()
	rec, err := mgr.StartRecover(ctx)
	if err != nil {
		_ = mgr.Close()
		s.err = fmt.Errorf("sandboxes are unavailable on this daemon: recovering: %w", err)
		log.Warn("sandboxes unavailable; functions are served as usual", "err", err)
		return s
	}
	log.Info("sandboxes ready; recovering the earlier daemon's in the background", "backend", be.Name())
	go func() { // ends with the recovery, which ends with ctx or Manager.Close
		rep, _ := rec.Wait(context.Background())
		log.Info("sandboxes recovered", "adopted", len(rep.Adopted), "dead", len(rep.Dead), "dropped", len(rep.Dropped),
			"orphans_destroyed", len(rep.Orphans), "interrupted", len(rep.Interrupted), "recover_ms", time.Since(t0).Milliseconds())
		for _, id := range rep.Dead {
			log.Warn("sandbox engine died while the daemon was down; marked dead (zygo sandbox rm removes it)", "sandbox_id", id)
		}
	}()
	s.mgr, s.be, s.memImages = mgr, be, secretImageDir(cfg.StateDir)
	watchSandboxes(reg, mgr)
	mgr.StartExpiry(ctx) // deadlines are in the records: ones that passed while the daemon was down end now
	return s
}

func newSandboxManager(ctx context.Context, cfg Config, st *store.Store, secrets *secret.Store, nh *network.Host, mreg *metrics.Registry, log *slog.Logger) (*sandbox.Manager, engine.Engine, error) {
	sc := cfg.Sandbox
	if sc.Disabled {
		return nil, nil, errors.New("disabled by configuration (zygo serve --no-sandboxes)")
	}
	if os.Geteuid() != 0 {
		return nil, nil, errors.New("gVisor sandboxes need the daemon to run as root")
	}
	guestBin, err := guest.FindBinary(sc.GuestBinary, "zygo serve --guest-binary")
	if err != nil {
		return nil, nil, err
	}
	engineDir, err := engineDir(cfg.StateDir, sc.EngineDir)
	if err != nil {
		return nil, nil, err
	}
	be, err := engine.New(engine.Config{Backend: sc.Backend, Runsc: sc.Runsc, StateDir: engineDir, GuestBinary: guestBin,
		Log: log.With("component", cmp.Or(sc.Backend, engine.Default))})
	if err != nil {
		return nil, nil, err
	}
	// Each sandbox's runsc-sandbox and runsc-gofer run as its own uid of the range, which
	// must reach the engine dir's rootfs/, bin/ and its instance's host/.
	if err := checkTraversable(engineDir, cfg.uidRange.First); err != nil {
		return nil, nil, fmt.Errorf("engine dir: %w", err)
	}
	reg, err := store.NewSandboxRegistry(ctx, st)
	if err != nil {
		return nil, nil, err
	}
	var templates []sandbox.Template
	for _, t := range sc.Templates {
		tm, err := sandbox.ParseTemplate(t)
		if err != nil {
			return nil, nil, fmt.Errorf("--template: %w", err)
		}
		templates = append(templates, tm)
	}
	memImages := secretImageDir(cfg.StateDir)
	if err := mountSecretImages(memImages, sc.SecretImagesMiB, log); err != nil {
		return nil, nil, err
	}
	log.Info("sandbox engine", "backend", be.Name(), "guest", guestBin, "engine_dir", engineDir)
	mcfg := sandbox.ManagerConfig{Backend: be, Registry: reg,
		ProtectedDirs: []string{cfg.StateDir, engineDir},
		ImageDir:      filepath.Join(cfg.StateDir, "images"), SecretImageDir: memImages, Log: log.With("component", "sandbox"),
		ReadyTimeout: sc.ReadyTimeout, Secrets: sandboxSecrets(secrets), HostIDs: hostid.NewAllocator(st, cfg.uidRange),
		Reseal: meteredReseal(mreg, sandbox.DefaultReseal), Templates: templates,
		MaxImportBytes: int64(sc.CheckpointImportMaxMiB) << 20}
	if nh != nil {
		mcfg.Network = sandbox.HostNetwork{Host: nh}
	}
	mgr, err := sandbox.NewManager(mcfg)
	return mgr, be, err
}

// sandboxSecrets returns the Manager's SecretsFunc over the daemon's secret store. It decrypts
// the named secrets each time it is called (at create and at every reseal), so each copy gets
// the values current at that moment.
func sandboxSecrets(st *secret.Store) sandbox.SecretsFunc {
	return func(ctx context.Context, names []string) (sandbox.SecretValues, error) {
		out := make(sandbox.SecretValues, len(names))
		for _, n := range names {
			if err := secret.ValidSharedName(n); err != nil {
				return nil, err
			}
			v, err := st.Value(ctx, n)
			if errdefs.IsNotFound(err) {
				return nil, &sandbox.UnknownSecretError{Name: n}
			}
			if err != nil {
				return nil, err
			}
			out[n] = v
		}
		return out, nil
	}
}

// api returns the Manager for the API server (its operations timed into the daemon's
// metrics), or nil (a nil interface) when unavailable.
func (s *sandboxes) api() api.Sandboxes {
	if s.mgr == nil {
		return nil
	}
	return meteredSandboxes{Manager: s.mgr, reg: s.reg}
}

// close lets go of the sandboxes without stopping them: they keep running and the next daemon
// adopts them. When none is left it also releases what runsc keeps for the whole engine dir
// (the mount of its empty network namespace), so a stopped daemon with no sandboxes leaves
// nothing mounted.
func (s *sandboxes) close() {
	if s.mgr == nil {
		return
	}
	if err := s.mgr.Close(); err != nil {
		s.log.Warn("closing sandbox manager", "err", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.be.ReleaseHost(ctx)
	if err != nil && !errdefs.IsFailedPrecondition(err) {
		s.log.Warn("releasing the sandbox engine's host resources", "err", err)
	}
	unmountSecretImagesIfEmpty(s.memImages, s.log)
}

// engineDir returns the backend's state directory: configured, or STATE/gv when that is short
// enough for the sockets under it, else a directory under /run named after the state dir.
func engineDir(stateDir, configured string) (string, error) {
	if configured != "" {
		abs, err := filepath.Abs(configured)
		if err != nil {
			return "", err
		}
		if len(abs) > MaxEngineDir {
			return "", fmt.Errorf("engine dir %s is longer than %d bytes: unix socket paths under it would not fit", abs, MaxEngineDir)
		}
		return abs, nil
	}
	if d := filepath.Join(stateDir, "gv"); len(d) <= MaxEngineDir {
		return d, nil
	}
	sum := sha256.Sum256([]byte(stateDir))
	return "/run/zygo/gv-" + hex.EncodeToString(sum[:6]), nil
}
