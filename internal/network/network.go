// Package network is the host side of Zygo's networking, shared by functions
// (internal/function) and gVisor sandboxes (internal/sandbox): it gives an
// endpoint (one function, one sandbox) a network namespace of its own joined
// to the host by a veth pair, NAT to the outside, a DNS forwarder, and a
// filter that no allow list can open.
//
// Lifecycle:
//
//	h, err := network.New(ctx, cfg)   // root; sweeps an earlier daemon's leftovers, installs table "zygo"
//	ep, err := h.Attach(ctx, spec)    // netns + veth + addresses + routes + rules + DNS forwarder
//	... start the endpoint's processes in ep.NetNSPath() ...
//	ep.Close(ctx)                     // removes all of it; idempotent
//	h.Close(ctx)                      // removes what is left, and the table
//
// What an endpoint can never reach, whatever its allow list says (the
// filter, nft.go): any address of the host itself (the input hook: loopback,
// the daemon's TCP API listener, every interface address), except UDP port
// 53 on its own host-side address (the DNS forwarder); other endpoints (the
// pool); 127.0.0.0/8, 0.0.0.0/8, link-local 169.254.0.0/16 (cloud metadata),
// other well-known metadata addresses, multicast and reserved ranges; IPv6
// at all (endpoints get IPv4 only); and the extra Config.Forbidden ranges.
// Nothing outside may open a connection to an endpoint: only replies to
// connections the endpoint opened, and connections the host itself opens
// (a daemon's port proxy) pass.
//
// Names: the table is "zygo"+Tag, host-side veths "zy"+Tag+"-"+8 hex digits,
// namespaces /run/netns/zygo+Tag+"-"+the same 8 hex digits (`ip netns`
// lists them). New and Host.Close remove every such object of their own
// Tag, so a daemon's restart leaves nothing of the one before, except the
// endpoints of instances that outlive the daemon: Endpoint.Detach leaves
// one (and Host.Close then the table, still filtering it), Config.Keep
// keeps it at the next New, Host.Adopt takes it back (adopt.go).
//
// Concurrency: a Host and its Endpoints are safe for concurrent use.
package network

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// DefaultPool is the address pool endpoints' /30s come from when
// Config.Pool is unset.
var DefaultPool = netip.MustParsePrefix("10.213.0.0/16")

// Config is the host side's configuration; the zero value is usable.
type Config struct {
	// Pool is an IPv4 prefix of at most /29 that endpoints' /30s are cut
	// from (host side .1, endpoint .2 of each). Default DefaultPool. It
	// must not overlap an address the host routes elsewhere.
	Pool netip.Prefix
	// DNS are the upstream resolvers the per-endpoint DNS forwarder asks
	// (UDP port 53), in order. Empty: the nameservers of the host's
	// /etc/resolv.conf, which may be a loopback stub (127.0.0.53): the
	// forwarder runs on the host, so it can reach one; an endpoint never
	// reaches the host's loopback itself.
	DNS []netip.Addr
	// Forbidden are extra IPv4 prefixes no endpoint may reach, added to the
	// built-in ones (ForbiddenPrefixes).
	Forbidden []netip.Prefix
	// Tag makes this Host's names its own (0 to 4 lowercase letters), so
	// that several daemons on one machine (tests) do not sweep each other's
	// endpoints. Default "".
	Tag string
	// Log receives sweep and cleanup diagnostics; nil discards them.
	Log *slog.Logger
	// Keep are the endpoint addresses (the .2 of their /30) of instances
	// that outlived the previous daemon (its recorded gVisor sandboxes):
	// New's sweep keeps their veth and namespace, and their /30s are
	// reserved, whether found or not, until Adopt or ReleaseKept, so that
	// Attach never hands one out while a recorded sandbox holds it.
	Keep []netip.Addr
}

// builtinForbidden are the ranges no endpoint may reach whatever its allow
// list: this host, link-local and metadata, multicast, reserved.
var builtinForbidden = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),          // "this network"
	netip.MustParsePrefix("127.0.0.0/8"),        // loopback
	netip.MustParsePrefix("169.254.0.0/16"),     // link-local, cloud metadata (169.254.169.254)
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud metadata
	netip.MustParsePrefix("168.63.129.16/32"),   // Azure wireserver
	netip.MustParsePrefix("224.0.0.0/4"),        // multicast
	netip.MustParsePrefix("240.0.0.0/4"),        // reserved, and 255.255.255.255
}

var tagPattern = regexp.MustCompile(`^[a-z]{0,4}$`)

// Host owns the zygo nftables table, the pool and every endpoint attached.
type Host struct {
	cfg       Config
	log       *slog.Logger
	forbidden []netip.Prefix // builtin + pool + cfg.Forbidden
	upstream  []netip.AddrPort

	failAttach func() error // tests: fails Attach after its rules are in

	mu     sync.Mutex
	slots  map[int]*Endpoint        // slot index in the pool → endpoint using it (kept ones too)
	kept   map[netip.Addr]*Endpoint // address → kept by New, not adopted or released yet
	left   map[string]bool          // tokens of detached endpoints: Close leaves them
	next   int                      // where the next slot search starts (no quick reuse)
	closed bool
}

// New validates cfg, checks for CAP_NET_ADMIN, turns on IPv4 forwarding
// (host-wide; left on at Close), removes what an earlier daemon with the same
// Tag left (veths, namespaces) except the endpoints of cfg.Keep, and
// replaces the table with a fresh one (one atomic batch: a kept endpoint is
// never unfiltered, and cut off until Adopt).
//
// Errors: ErrInvalidArgument naming the field for a bad cfg;
// ErrFailedPrecondition when the process lacks CAP_NET_ADMIN or the kernel
// refuses the table (no nf_tables).
func New(ctx context.Context, cfg Config) (*Host, error) {
	if err := validate(&cfg); err != nil {
		return nil, err
	}
	if !hasNetAdmin() {
		return nil, fmt.Errorf("network needs root (CAP_NET_ADMIN) to make namespaces and veths: %w", errdefs.ErrFailedPrecondition)
	}
	h := &Host{cfg: cfg, log: cfg.Log, slots: map[int]*Endpoint{}, kept: map[netip.Addr]*Endpoint{}, left: map[string]bool{}}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.forbidden = append(append(append([]netip.Prefix{}, builtinForbidden...), cfg.Pool), cfg.Forbidden...)
	up, err := upstreams(cfg.DNS)
	if err != nil {
		return nil, err
	}
	h.upstream = up
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return nil, fmt.Errorf("enabling ipv4 forwarding: %w", err)
	}
	if err := h.checkPoolFree(); err != nil {
		return nil, err
	}
	h.sweepKeeping(cfg.Keep)
	if err := h.installTable(); err != nil {
		return nil, fmt.Errorf("installing nftables table %q: %w: %w", h.tableName(), err, errdefs.ErrFailedPrecondition)
	}
	return h, nil
}

// ForbiddenPrefixes returns the built-in ranges no endpoint may reach (the
// host's own addresses and the pool come on top, and Config.Forbidden).
func ForbiddenPrefixes() []netip.Prefix { return append([]netip.Prefix{}, builtinForbidden...) }

func validate(cfg *Config) error {
	if !cfg.Pool.IsValid() {
		cfg.Pool = DefaultPool
	}
	if !cfg.Pool.Addr().Is4() || cfg.Pool.Bits() > 29 {
		return fmt.Errorf("network pool %s: must be an IPv4 prefix of /29 or wider: %w", cfg.Pool, errdefs.ErrInvalidArgument)
	}
	cfg.Pool = cfg.Pool.Masked()
	for _, p := range builtinForbidden {
		if p.Overlaps(cfg.Pool) {
			return fmt.Errorf("network pool %s: overlaps the forbidden range %s: %w", cfg.Pool, p, errdefs.ErrInvalidArgument)
		}
	}
	for i, p := range cfg.Forbidden {
		if !p.IsValid() || !p.Addr().Is4() {
			return fmt.Errorf("network forbidden[%d]: %q is not an IPv4 prefix: %w", i, p, errdefs.ErrInvalidArgument)
		}
		cfg.Forbidden[i] = p.Masked()
	}
	for i, a := range cfg.DNS {
		if !a.IsValid() || !a.Is4() {
			return fmt.Errorf("network dns[%d]: %q is not an IPv4 address: %w", i, a, errdefs.ErrInvalidArgument)
		}
	}
	if !tagPattern.MatchString(cfg.Tag) {
		return fmt.Errorf("network tag %q: 0 to 4 lowercase letters: %w", cfg.Tag, errdefs.ErrInvalidArgument)
	}
	return nil
}

// hasNetAdmin reports whether the process's effective set holds CAP_NET_ADMIN.
func hasNetAdmin() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[0].Effective&(1<<unix.CAP_NET_ADMIN) != 0
}

// upstreams returns dns as port-53 addresses, or the host's resolv.conf
// nameservers (IPv4 only) when dns is empty.
func upstreams(dns []netip.Addr) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, a := range dns {
		out = append(out, netip.AddrPortFrom(a, 53))
	}
	if len(out) > 0 {
		return out, nil
	}
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading /etc/resolv.conf: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() {
				out = append(out, netip.AddrPortFrom(a, 53))
			}
		}
	}
	return out, nil
}

func (h *Host) tableName() string  { return "zygo" + h.cfg.Tag }
func (h *Host) vethPrefix() string { return "zy" + h.cfg.Tag + "-" }
func (h *Host) nsPrefix() string   { return "zygo" + h.cfg.Tag + "-" }

// Close closes every endpoint still attached, then removes anything else of
// this Tag (a sweep) and the table, except what detached endpoints and the
// ones kept but not adopted yet use: those (and then the table, whose rules
// keep filtering them) stay for the next daemon. Idempotent. Errors are
// joined; the sweep runs whatever they are.
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	leave := map[string]bool{}
	for tok := range h.left {
		leave[tok] = true
	}
	for _, ep := range h.kept {
		if ep.token != "" {
			leave[ep.token] = true
		}
	}
	eps := make([]*Endpoint, 0, len(h.slots))
	for _, ep := range h.slots {
		if h.kept[ep.ip] != ep {
			eps = append(eps, ep)
		}
	}
	h.mu.Unlock()
	var errs []error
	for _, ep := range eps {
		errs = append(errs, ep.Close(ctx))
	}
	h.sweep(leave)
	return errors.Join(errs...)
}

// checkPoolFree fails (ErrFailedPrecondition, naming the overlap) when the
// pool overlaps a route or an address of the host that is not this Host's
// own (a veth of its tag): handing out such addresses would shadow a real
// network (the pool's /30s become local routes) or another daemon's pool.
func (h *Host) checkPoolFree() error {
	pool := h.cfg.Pool
	name := func(index int) string {
		if l, err := netlink.LinkByIndex(index); err == nil {
			return l.Attrs().Name
		}
		return fmt.Sprintf("#%d", index)
	}
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("listing the host's routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue // the default route
		}
		dst, ok := netipPrefix(r.Dst)
		if !ok || !dst.Overlaps(pool) || dst.Bits() == 0 {
			continue
		}
		if dev := name(r.LinkIndex); !strings.HasPrefix(dev, h.vethPrefix()) {
			return fmt.Errorf("the network pool %s overlaps the host's route to %s (dev %s): choose a free range with --network-pool: %w",
				pool, dst, dev, errdefs.ErrFailedPrecondition)
		}
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("listing the host's addresses: %w", err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		if !ok || !pool.Contains(ip) {
			continue
		}
		if dev := name(a.LinkIndex); !strings.HasPrefix(dev, h.vethPrefix()) {
			return fmt.Errorf("the network pool %s holds the host's address %s (dev %s): choose a free range with --network-pool: %w",
				pool, ip, dev, errdefs.ErrFailedPrecondition)
		}
	}
	return nil
}

// netipPrefix converts a *net.IPNet.
func netipPrefix(n *net.IPNet) (netip.Prefix, bool) {
	ip, ok := netip.AddrFromSlice(n.IP.To4())
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(ip, ones).Masked(), true
}
