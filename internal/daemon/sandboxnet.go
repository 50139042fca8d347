package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/zygo-run/zygo/internal/network"
)

// SandboxNetConfig configures the network of gVisor sandboxes: each engine instance (a
// sandbox, every fork child, every rollback) gets an endpoint of internal/network's Host, its
// own namespace, veth, address and MAC, and runs runsc's own network stack on it.
type SandboxNetConfig struct {
	// Disabled runs every sandbox without network (loopback only); asking for egress is then
	// a failed_precondition.
	Disabled bool
	// Pool is the IPv4 prefix the endpoints' /30s come from [network.DefaultPool].
	Pool string
	// Tag makes the host-side names (nft table, veths, namespaces) this daemon's own, 0 to 4
	// lowercase letters [""]: a daemon sweeps what an earlier one of the same tag left.
	Tag string
}

// openSandboxNetwork returns the host side of the sandboxes' network, or nil when it is
// disabled or cannot be set up (logged: sandboxes then run without network, and a create
// asking for egress is refused saying so).
func openSandboxNetwork(ctx context.Context, cfg SandboxNetConfig, log *slog.Logger) *network.Host {
	if cfg.Disabled {
		log.Info("sandbox network disabled by configuration: sandboxes get loopback only")
		return nil
	}
	h, err := newSandboxNetwork(ctx, cfg, log)
	if err != nil {
		log.Warn("sandbox network unavailable: sandboxes get loopback only", "err", err)
		return nil
	}
	return h
}

func newSandboxNetwork(ctx context.Context, cfg SandboxNetConfig, log *slog.Logger) (*network.Host, error) {
	ncfg := network.Config{Tag: cfg.Tag, Log: log.With("component", "sandbox-network")}
	if cfg.Pool != "" {
		p, err := netip.ParsePrefix(cfg.Pool)
		if err != nil {
			return nil, fmt.Errorf("sandbox network pool %q: %w", cfg.Pool, err)
		}
		ncfg.Pool = p
	}
	return network.New(ctx, ncfg)
}

// closeSandboxNetwork removes the host side (table, endpoints); h may be nil.
func closeSandboxNetwork(ctx context.Context, h *network.Host, log *slog.Logger) {
	if h == nil {
		return
	}
	if err := h.Close(ctx); err != nil {
		log.Warn("closing the sandbox network", "err", err)
	}
}
