package daemon

import (
	"context"

	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/pool"
	"github.com/zygo-run/zygo/internal/seccomp"
	"github.com/zygo-run/zygo/internal/secret"
	"github.com/zygo-run/zygo/internal/store"
)

// openPools makes the runtime pool manager on the same sandboxes as the
// functions (fcfg: state dir, agents, bwrap, uids, cgroups) and restores
// the stored pools (their shared zygotes start in the background).
func openPools(ctx context.Context, cfg Config, fcfg function.Config, st *store.Store, secrets *secret.Store) (*pool.Manager, error) {
	strict, err := seccomp.Strict()
	if err != nil {
		return nil, err
	}
	launcher := function.NewSandboxLauncher(function.SandboxConfig{StateDir: fcfg.StateDir, AgentDir: fcfg.AgentDir,
		Bwrap: fcfg.Bwrap, RunTmpfsMiB: fcfg.RunTmpfsMiB, ReadyTimeout: fcfg.ReadyTimeout, RandGuard: fcfg.RandGuard,
		NoHugePages: fcfg.NoHugePages, StrictFilter: strict, Limiter: fcfg.Limiter})
	m := pool.NewManager(pool.Config{StateDir: cfg.StateDir, Launcher: launcher, HostIDs: fcfg.HostIDs,
		Limiter: fcfg.Limiter, Secrets: secrets, ReadyTimeout: fcfg.ReadyTimeout, Log: cfg.Log.With("component", "pools")}, st)
	if err := m.Restore(ctx); err != nil {
		m.Shutdown()
		return nil, err
	}
	return m, nil
}
