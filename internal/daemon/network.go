package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"

	"github.com/zygo-run/zygo/internal/network"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/store"
)

// NetworkConfig configures the host side of networking (internal/network),
// shared by functions with [network] egress = "allow" and by sandboxes.
// Flags: --network-pool, --network-dns, --network-forbid, --network-tag,
// --no-network.
type NetworkConfig struct {
	// Disabled runs the daemon without networking: functions that ask for
	// egress are refused at deploy.
	Disabled bool
	// Pool is the IPv4 CIDR endpoints' /30s come from; "" is
	// network.DefaultPool (10.213.0.0/16).
	Pool string
	// DNS are the upstream resolvers (IPv4 addresses) of the DNS forwarder;
	// empty: the host's /etc/resolv.conf nameservers.
	DNS []string
	// Forbidden are extra IPv4 CIDRs no endpoint may reach (an internal
	// network, a database subnet), on top of network.ForbiddenPrefixes.
	Forbidden []string
	// Tag suffixes the names of the table, veths and namespaces (0-4
	// lowercase letters), for several daemons on one machine (tests).
	Tag string
}

// openNetwork returns the daemon's network host, or nil when networking is
// disabled or the daemon is not root (logged). keep are the addresses of the
// recorded sandboxes (sandboxAddresses): their endpoints survive the sweep
// and their /30s are never handed out until recovery adopts or releases
// them. As root, a failure (no nf_tables, a bad flag) is a startup error
// naming the flag or the cause.
func openNetwork(ctx context.Context, nc NetworkConfig, keep []netip.Addr, log *slog.Logger) (*network.Host, error) {
	if nc.Disabled {
		log.Info("networking disabled (--no-network): functions with network egress are refused")
		return nil, nil
	}
	cfg := network.Config{Tag: nc.Tag, Log: log, Keep: keep}
	if nc.Pool != "" {
		p, err := netip.ParsePrefix(nc.Pool)
		if err != nil {
			return nil, fmt.Errorf("--network-pool %q: not a CIDR: %w", nc.Pool, err)
		}
		cfg.Pool = p
	}
	for _, s := range nc.DNS {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("--network-dns %q: not an IP address: %w", s, err)
		}
		cfg.DNS = append(cfg.DNS, a)
	}
	for _, s := range nc.Forbidden {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("--network-forbid %q: not a CIDR: %w", s, err)
		}
		cfg.Forbidden = append(cfg.Forbidden, p)
	}
	if os.Geteuid() != 0 {
		log.Warn("not root: no networking (functions with network egress are refused)")
		return nil, nil
	}
	h, err := network.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("starting networking (or run with --no-network): %w", err)
	}
	return h, nil
}

// sandboxAddresses returns the addresses of the recorded sandboxes that may still run (neither
// failed nor dead) and have a network, for network.Config.Keep; none when sandboxes or their
// network are off (then nothing adopts them, and their endpoints are swept).
func sandboxAddresses(ctx context.Context, cfg Config, st *store.Store) ([]netip.Addr, error) {
	if cfg.Sandbox.Disabled || cfg.Sandbox.Network.Disabled || cfg.Network.Disabled {
		return nil, nil
	}
	reg, err := store.NewSandboxRegistry(ctx, st)
	if err != nil {
		return nil, fmt.Errorf("opening the sandbox records: %w", err)
	}
	recs, err := reg.ListSandboxes(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the sandbox records: %w", err)
	}
	var out []netip.Addr
	for _, r := range recs {
		if r.State == sandbox.Failed || r.State == sandbox.Dead || r.Net == nil {
			continue
		}
		if a, err := netip.ParseAddr(r.Net.Address); err == nil {
			out = append(out, a)
		}
	}
	return out, nil
}
