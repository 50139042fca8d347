package function

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/cgroup"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/nsbox"
)

// SandboxConfig configures NewSandboxLauncher: how the runtimes' sandboxes
// (bubblewrap, internal/agentproc) are made.
type SandboxConfig struct {
	StateDir string // run/ (one directory per sandbox) and etc/ live here
	AgentDir string // extracted agents (bound at /opt/zygo/agents)
	Bwrap    string // path of bwrap
	// RunTmpfsMiB, when > 0, puts each sandbox's run directory on a tmpfs
	// of that size (agentproc.Spec.RunTmpfsMiB).
	RunTmpfsMiB int
	// ReadyTimeout bounds the import and warm-up of each sandbox.
	ReadyTimeout time.Duration
	// RandGuard says AgentDir holds the native-randomness guard; fork
	// zygotes then preload it.
	RandGuard bool
	// NoHugePages: fork zygotes keep their code and heap on small pages
	// (agentproc.Spec.NoHugePages).
	NoHugePages bool
	// StrictFilter is the strict seccomp program (internal/seccomp.Strict).
	StrictFilter []byte
	// Limiter gives each sandbox a cgroup with the manifest's
	// zygote_memory_mib and zygote_pids; nil: none.
	Limiter Limiter
}

// sandboxLauncher is the Launcher whose runtimes run bwrap sandboxes.
type sandboxLauncher struct{ cfg SandboxConfig }

// NewSandboxLauncher returns the Launcher of the three runtimes on
// bubblewrap sandboxes: the fork zygote, spawn, and the Node worker pool.
func NewSandboxLauncher(cfg SandboxConfig) Launcher { return &sandboxLauncher{cfg: cfg} }

// NewRunner implements Launcher.
func (l *sandboxLauncher) NewRunner(opts RunnerOptions) (Runner, error) {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	switch opts.Kind {
	case KindFork:
		return &forkRunner{l: l, opts: opts}, nil
	case KindSpawn:
		return &spawnRunner{l: l, opts: opts}, nil
	case KindWorker:
		return newWorkerRunner(l, opts), nil
	}
	return nil, fmt.Errorf("%w: unknown runtime kind %q", errdefs.ErrInvalidArgument, opts.Kind)
}

// start starts one sandbox of opts in mode and waits until it is ready.
// The caller owns the zygote and must Stop it. Every start of every runtime
// (a function's first start and restarts, each spawn, each Node worker, each
// lane of a runtime pool) comes through here, so the manifest's interpreter
// is vetted here each time (CheckInterpreter: errdefs.ErrInvalidArgument
// naming interpreter and the offending path), not only at deploy: a virtual
// environment under /tmp that was fine then may since have been removed and
// re-created by another user.
func (l *sandboxLauncher) start(ctx context.Context, opts RunnerOptions, mode agentproc.Mode) (*agentproc.Process, error) {
	if interp := opts.Manifest.Interpreter; interp != "" {
		if err := CheckInterpreter(l.cfg.StateDir, interp); err != nil {
			return nil, fmt.Errorf("starting a sandbox of %q: %w", opts.Function, err)
		}
	}
	return agentproc.Start(ctx, l.spec(opts, mode))
}

// spec returns the agentproc.Spec of a new sandbox of opts in mode: bubblewrap
// is configured here and nowhere else in this package.
func (l *sandboxLauncher) spec(opts RunnerOptions, mode agentproc.Mode) agentproc.Spec {
	id := newID("z")
	man := opts.Manifest
	preload := ""
	if mode == agentproc.ModeFork && l.cfg.RandGuard {
		preload = nsbox.RandGuardPath // only a zygote has children to share its memory
	}
	spec := agentproc.Spec{
		Box: nsbox.Spec{
			Bwrap: l.cfg.Bwrap, HostUID: opts.HostUID, Interpreter: man.Interpreter,
			CodeDir: opts.CodeDir, AgentDir: l.cfg.AgentDir, EtcDir: filepath.Join(l.cfg.StateDir, "etc"),
			Preload: preload, NetNS: opts.NetNS, ResolvConf: opts.ResolvConf,
		},
		Runtime:      string(man.Runtime),
		Handler:      man.Handler,
		Mode:         mode,
		Env:          man.SortedEnv(),
		PythonPath:   man.PythonPath,
		MemoryMiB:    man.Limits.ZygoteMemoryMiB,
		NoHugePages:  l.cfg.NoHugePages,
		RunDir:       filepath.Join(l.cfg.StateDir, "run", id),
		RunTmpfsMiB:  l.cfg.RunTmpfsMiB,
		ReadyTimeout: l.readyTimeout(man),
		Secrets:      len(man.Secrets) > 0,
		PreFork:      preFork(man),
		StrictFilter: l.cfg.StrictFilter,
		Output:       opts.Output,
		Hold:         opts.Hold,
		Log:          opts.Log.With("zygote", id),
	}
	if l.cfg.Limiter != nil {
		spec.Cgroup = l.sandboxCgroup(opts, id)
	}
	return spec
}

// readyTimeout bounds the import and warm-up of a sandbox of man:
// limits.import_timeout_ms when set, else the launcher's ReadyTimeout.
func (l *sandboxLauncher) readyTimeout(man *Manifest) time.Duration {
	if man.Limits.ImportTimeoutMs > 0 {
		return time.Duration(man.Limits.ImportTimeoutMs) * time.Millisecond
	}
	return l.cfg.ReadyTimeout
}

// sandboxCgroup returns agentproc.Spec.Cgroup for sandbox id of opts: a group
// <function>/<id>, beside its requests' groups, with the manifest's
// zygote_memory_mib and zygote_pids, whose Exceeded names those keys.
func (l *sandboxLauncher) sandboxCgroup(opts RunnerOptions, id string) func(context.Context, int) (agentproc.Cgroup, error) {
	return func(ctx context.Context, hostPID int) (agentproc.Cgroup, error) {
		lim := opts.Manifest.Limits
		g, err := l.cfg.Limiter.Place(ctx, opts.Function+"/"+id, hostPID, cgroup.Limits{MemoryMiB: lim.ZygoteMemoryMiB, PIDs: lim.ZygotePIDs})
		if err != nil {
			return nil, err
		}
		return sandboxGroup{g}, nil
	}
}

// runOnce serves call on z, a sandbox that serves one request (spawn mode
// or a Node worker), and stops it; Elapsed counts from t0. It answers as
// soon as the result is in: the request's output is complete then, because
// both agents make fds 1 and 2 themselves the request's files before user
// code (docs/protocol.md), so nothing of the request is left in the
// sandbox's own pipes. The agent's exit and the rest of the stop (bubblewrap's
// exit, deleting the sandbox's cgroup, unmounting and removing its run
// directory: about 20 ms of a warm Node request when it was waited for) run
// in the background, counted in g (the caller's gate, entered) so that Drain
// waits for them. The request's secret files are released inside z.Run.
func runOnce(ctx context.Context, g *gate, z oneShot, call Call, t0 time.Time) (*agentproc.Result, error) {
	g.hold()
	defer func() {
		go func() {
			defer g.leave()
			z.Stop()
		}()
	}()
	res, err := z.Run(ctx, call.request(filesOf(z)))
	if res != nil {
		res.Elapsed = time.Since(t0)
	}
	return res, err
}
