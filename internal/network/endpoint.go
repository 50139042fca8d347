package network

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// EndpointSpec says what one endpoint may reach.
type EndpointSpec struct {
	// ID names the endpoint in errors and logs (a function's name, a
	// sandbox id); it is not used in kernel object names.
	ID string
	// Egress off: the endpoint has its namespace, address and DNS but every
	// packet it sends out is refused.
	Egress bool
	// Allow, when not empty, is the only IPv4 ranges the endpoint may
	// reach; empty allows everything not forbidden. Deny is refused even
	// inside Allow. Neither can open a forbidden range (Validate).
	Allow, Deny []netip.Prefix
}

// Endpoint is one attached namespace. Its methods are safe for concurrent
// use; Close is idempotent.
type Endpoint struct {
	h      *Host
	spec   EndpointSpec
	token  string // 8 hex digits in the names
	slot   int
	hostIf string
	hostIP netip.Addr // host side of the /30, the default route and DNS server
	ip     netip.Addr // the endpoint's address (on eth0 inside)
	mac    net.HardwareAddr
	dns    *forwarder

	once     sync.Once
	closeErr error
}

// InsideIf is the interface name inside every endpoint's namespace.
const InsideIf = "eth0"

// NetNSPath is the bind-mounted namespace file (/run/netns/zygo…); open it
// for an fd (setns, runsc's spec). It exists until Close.
func (e *Endpoint) NetNSPath() string { return filepath.Join(netnsDir, e.h.nsPrefix()+e.token) }

// IP is the endpoint's own address, on InsideIf, with its /30 prefix length.
func (e *Endpoint) IP() netip.Prefix { return netip.PrefixFrom(e.ip, 30) }

// Gateway is the host side's address: the default route and the DNS server.
func (e *Endpoint) Gateway() netip.Addr { return e.hostIP }

// MAC is InsideIf's address: random, locally administered, unicast.
func (e *Endpoint) MAC() net.HardwareAddr { return append(net.HardwareAddr{}, e.mac...) }

// HostIf is the host-side veth's name.
func (e *Endpoint) HostIf() string { return e.hostIf }

// ResolvConf is the content for the endpoint's /etc/resolv.conf: the DNS
// forwarder on Gateway.
func (e *Endpoint) ResolvConf() string {
	return fmt.Sprintf("nameserver %s\noptions timeout:2 attempts:2\n", e.hostIP)
}

// Validate checks spec without attaching: Allow and Deny must be IPv4
// prefixes, and Allow must not contain or overlap a forbidden range.
// Errors are ErrInvalidArgument naming the field ("network.allow[1]").
func (h *Host) Validate(spec EndpointSpec) error {
	return ValidateLists(spec.Allow, spec.Deny, append(h.forbidden, hostAddrs()...))
}

// MaxListEntries bounds allow and deny each: every entry is one rule in the
// endpoint's nftables chain, installed in one netlink batch.
const MaxListEntries = 64

// hostAddrs returns the host's own IPv4 addresses as /32s (an allow list
// naming one is refused: the filter would refuse the traffic anyway).
func hostAddrs() []netip.Prefix {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok {
			out = append(out, netip.PrefixFrom(ip, 32))
		}
	}
	return out
}

// ValidateLists is Validate for callers without a Host (manifest parsing):
// extra are forbidden ranges on top of ForbiddenPrefixes.
func ValidateLists(allow, deny, extra []netip.Prefix) error {
	forbidden := append(ForbiddenPrefixes(), extra...)
	for field, list := range map[string][]netip.Prefix{"network.allow": allow, "network.deny": deny} {
		if len(list) > MaxListEntries {
			return fmt.Errorf("%s: %d entries, at most %d: %w", field, len(list), MaxListEntries, errdefs.ErrInvalidArgument)
		}
	}
	for i, p := range allow {
		if !p.IsValid() || !p.Addr().Is4() {
			return fmt.Errorf("network.allow[%d]: %q is not an IPv4 CIDR: %w", i, p, errdefs.ErrInvalidArgument)
		}
		for _, f := range forbidden {
			if f.Overlaps(p) {
				return fmt.Errorf("network.allow[%d]: %s overlaps %s, which no endpoint may reach: %w", i, p, f, errdefs.ErrInvalidArgument)
			}
		}
	}
	for i, p := range deny {
		if !p.IsValid() || !p.Addr().Is4() {
			return fmt.Errorf("network.deny[%d]: %q is not an IPv4 CIDR: %w", i, p, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// Attach makes an endpoint: a namespace, a veth pair (InsideIf inside with
// a random MAC), a /30 from the pool, a default route, the filter rules of
// spec, and a DNS forwarder on the host side. On error nothing of it is left.
//
// Errors: ErrInvalidArgument (spec, Validate); ErrUnavailable when the pool
// is exhausted; ErrFailedPrecondition after Host.Close; otherwise the
// kernel's error, wrapped.
func (h *Host) Attach(ctx context.Context, spec EndpointSpec) (_ *Endpoint, err error) {
	if err := h.Validate(spec); err != nil {
		return nil, err
	}
	spec.Allow, spec.Deny = masked(spec.Allow), masked(spec.Deny)
	ep := &Endpoint{h: h, spec: spec, token: randomHex(4), mac: randomMAC()}
	ep.hostIf = h.vethPrefix() + ep.token
	if err := h.reserve(ep); err != nil {
		return nil, err
	}
	var undo []func() error
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				if uerr := undo[i](); uerr != nil {
					h.log.Warn("undoing a failed attach", "endpoint", spec.ID, "err", uerr)
				}
			}
		}
	}()
	undo = append(undo, func() error { h.release(ep); return nil })
	nsPath := ep.NetNSPath()
	if err := createNetNS(nsPath); err != nil {
		return nil, fmt.Errorf("creating netns for %s: %w", spec.ID, err)
	}
	undo = append(undo, func() error { return deleteNetNS(nsPath) })
	if err := ep.makeLinks(nsPath); err != nil {
		return nil, fmt.Errorf("configuring veth for %s: %w", spec.ID, err)
	}
	undo = append(undo, ep.deleteLink)
	// Undo first: a batch the kernel took in part, or took and then failed
	// to acknowledge, must not leave its chain and jumps behind.
	undo = append(undo, func() error { return h.deleteEndpointRules(ep.token) })
	if err := h.addEndpointRules(ep); err != nil {
		return nil, fmt.Errorf("adding nftables rules for %s: %w", spec.ID, err)
	}
	if h.failAttach != nil {
		if err := h.failAttach(); err != nil {
			return nil, err
		}
	}
	if ep.dns, err = startForwarder(ep.hostIP, h.upstream, h.log); err != nil {
		return nil, fmt.Errorf("starting dns forwarder for %s: %w", spec.ID, err)
	}
	return ep, nil
}

func masked(ps []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, len(ps))
	for i, p := range ps {
		out[i] = p.Masked()
	}
	return out
}

// reserve gives ep a free /30 of the pool, starting after the last one
// handed out so that a freed address is not reused at once.
func (h *Host) reserve(ep *Endpoint) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return fmt.Errorf("network host closed: %w", errdefs.ErrFailedPrecondition)
	}
	n := 1 << (32 - h.cfg.Pool.Bits() - 2)
	for i := 0; i < n; i++ {
		s := (h.next + i) % n
		if _, used := h.slots[s]; used {
			continue
		}
		base := h.cfg.Pool.Addr().As4()
		v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
		v += uint32(s) * 4
		ep.slot, h.next = s, s+1
		ep.hostIP = netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v + 1)})
		ep.ip = netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v + 2)})
		h.slots[s] = ep
		return nil
	}
	return fmt.Errorf("network pool %s exhausted (%d endpoints): %w", h.cfg.Pool, n, errdefs.ErrUnavailable)
}

func (h *Host) release(ep *Endpoint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.slots[ep.slot] == ep {
		delete(h.slots, ep.slot)
	}
}

// makeLinks creates the veth pair with its peer already in the namespace,
// and sets addresses, links and the default route on both sides.
func (e *Endpoint) makeLinks(nsPath string) error {
	nsFile, err := os.Open(nsPath)
	if err != nil {
		return err
	}
	defer nsFile.Close()
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: e.hostIf},
		PeerName:         InsideIf,
		PeerHardwareAddr: e.mac,
		PeerNamespace:    netlink.NsFd(int(nsFile.Fd())),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("adding veth %s: %w", e.hostIf, err)
	}
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+e.hostIf+"/disable_ipv6", []byte("1"), 0o644)
	host, err := netlink.LinkByName(e.hostIf)
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: ipNet(e.hostIP)}); err != nil {
		return fmt.Errorf("adding host-side address: %w", err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return err
	}
	nh, err := netlink.NewHandleAt(netnsHandle(nsFile))
	if err != nil {
		return err
	}
	defer nh.Close()
	for _, name := range []string{"lo", InsideIf} {
		l, err := nh.LinkByName(name)
		if err != nil {
			return fmt.Errorf("finding %s inside: %w", name, err)
		}
		if name == InsideIf {
			if err := nh.AddrAdd(l, &netlink.Addr{IPNet: ipNet(e.ip)}); err != nil {
				return fmt.Errorf("adding inside address: %w", err)
			}
		}
		if err := nh.LinkSetUp(l); err != nil {
			return fmt.Errorf("setting %s up: %w", name, err)
		}
	}
	gw := net.IP(e.hostIP.AsSlice())
	if err := nh.RouteAdd(&netlink.Route{Gw: gw}); err != nil {
		return fmt.Errorf("adding default route: %w", err)
	}
	return nil
}

func ipNet(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(30, 32)}
}

func (e *Endpoint) deleteLink() error {
	l, err := netlink.LinkByName(e.hostIf)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return err
	}
	return netlink.LinkDel(l)
}

// Close stops the DNS forwarder and removes the rules, the veth pair and
// the namespace, then frees the address. Processes still in the namespace
// keep it alive in the kernel (without its veth) until they exit: stop them
// first. Idempotent; errors are joined and the rest still runs.
func (e *Endpoint) Close(ctx context.Context) error {
	e.once.Do(func() {
		var errs []error
		if e.dns != nil {
			e.dns.close()
		}
		if err := e.h.deleteEndpointRules(e.token); err != nil {
			errs = append(errs, fmt.Errorf("removing nftables rules: %w", err))
		}
		if err := e.deleteLink(); err != nil {
			errs = append(errs, fmt.Errorf("removing veth %s: %w", e.hostIf, err))
		}
		if err := deleteNetNS(e.NetNSPath()); err != nil {
			errs = append(errs, fmt.Errorf("removing netns: %w", err))
		}
		e.h.release(e)
		if e.closeErr = errors.Join(errs...); e.closeErr != nil {
			e.closeErr = fmt.Errorf("closing network of %s: %w", e.spec.ID, e.closeErr)
		}
	})
	return e.closeErr
}

// sweep removes every veth, namespace and the table of this Tag, except the
// veths and namespaces of the tokens in leave, and then the table too.
func (h *Host) sweep(leave map[string]bool) {
	links, err := netlink.LinkList()
	if err == nil {
		for _, l := range links {
			if isOurs(l.Attrs().Name, h.vethPrefix()) && !leave[l.Attrs().Name[len(h.vethPrefix()):]] {
				if err := netlink.LinkDel(l); err != nil {
					h.log.Warn("sweeping veth", "veth", l.Attrs().Name, "err", err)
				}
			}
		}
	}
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		if isOurs(e.Name(), h.nsPrefix()) && !leave[e.Name()[len(h.nsPrefix()):]] {
			if err := deleteNetNS(filepath.Join(netnsDir, e.Name())); err != nil {
				h.log.Warn("sweeping netns", "netns", e.Name(), "err", err)
			}
		}
	}
	if len(leave) > 0 {
		return
	}
	if err := h.deleteTable(); err != nil {
		h.log.Warn("sweeping nftables table", "table", h.tableName(), "err", err)
	}
}

// isOurs reports whether name is prefix followed by exactly 8 hex digits.
func isOurs(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || len(rest) != 8 {
		return false
	}
	_, err := hex.DecodeString(rest)
	return err == nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// randomMAC returns a random locally administered unicast MAC.
func randomMAC() net.HardwareAddr {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	b[0] = (b[0] | 0x02) &^ 0x01
	return b
}
