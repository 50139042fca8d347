// Package engine chooses the sandbox backend by name and builds it: the one place that knows
// every backend (gVisor today; a KVM microVM would register here). The daemon and zygo check
// both build theirs with New, so configuration, not code, picks the engine.
package engine

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/gvisor"
)

// Default is the backend used when none is configured.
const Default = "gvisor"

// Config configures the backend New builds. Zero fields take the defaults in brackets.
type Config struct {
	// Backend names the engine: one of Names() [Default].
	Backend string
	// StateDir holds everything the backend keeps (its own layout). Required.
	StateDir string
	// GuestBinary is the static zygo-guest every instance runs. Required.
	GuestBinary string
	// Runsc is gVisor's runsc binary [gvisor.ResolveRunsc("")]; other backends ignore it.
	Runsc string
	Log   *slog.Logger // [slog.Default()]
}

// Engine is a sandbox backend as its owners (the daemon, zygo check) hold it: the Backend the
// Manager drives, plus ReleaseHost, which undoes what the engine keeps on the host for all its
// instances together. Call ReleaseHost once no instance is left (it returns an error wrapping
// errdefs.ErrFailedPrecondition while some remain), before deleting StateDir.
type Engine interface {
	sandbox.Backend
	ReleaseHost(ctx context.Context) error
}

// constructors are the backends New can build, by name.
var constructors = map[string]func(Config) (Engine, error){
	"gvisor": func(cfg Config) (Engine, error) {
		return gvisor.New(gvisor.Config{Runsc: cfg.Runsc, StateDir: cfg.StateDir, GuestBinary: cfg.GuestBinary, Log: cfg.Log})
	},
}

// Names returns the backends New can build, sorted.
func Names() []string {
	ns := make([]string, 0, len(constructors))
	for n := range constructors {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// New builds the backend cfg.Backend names. An unknown name is an error wrapping
// errdefs.ErrInvalidArgument that lists the known ones; otherwise it returns the backend's
// own error, unwrapped (gVisor: errdefs.ErrUnavailable naming scripts/install-runsc.sh when runsc is
// missing).
func New(cfg Config) (Engine, error) {
	if cfg.Backend == "" {
		cfg.Backend = Default
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	mk, ok := constructors[cfg.Backend]
	if !ok {
		return nil, fmt.Errorf("sandbox backend %q: want one of %s: %w", cfg.Backend, strings.Join(Names(), ", "),
			errdefs.ErrInvalidArgument)
	}
	return mk(cfg) // its errors name what is missing and how to install it, as they always have
}
