package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// Endpoints that outlive the daemon (a gVisor sandbox keeps running across a daemon restart):
//
//	ep.Detach()                           // the old daemon, stopping: forget ep, leave its kernel state
//	h, _ := New(ctx, Config{Keep: addrs}) // the new daemon: keeps the veths and namespaces of addrs,
//	                                      // their /30s reserved before any Attach
//	ep, err := h.Adopt(ctx, addr, spec)   // rebuilds the Endpoint: its rules and DNS forwarder again
//	h.ReleaseKept(ctx)                    // once adoption is over: removes what nobody adopted
//
// Between New and Adopt a kept endpoint's packets meet the fresh table's egress chain, whose last
// rule refuses: it is cut off, never unfiltered. While no daemon runs, the table stays (Close
// keeps it when endpoints were detached), so the filter guards the detached endpoints meanwhile.

// keptEndpoint builds the Endpoint of a kept /30 whose host side is hostIf (token) with hostIP.
func (h *Host) keptEndpoint(token string, slot int, hostIP netip.Addr) *Endpoint {
	ep := &Endpoint{h: h, token: token, slot: slot, hostIP: hostIP, ip: hostIP.Next()}
	if token != "" {
		ep.hostIf = h.vethPrefix() + token
	}
	return ep
}

// slotOf returns the slot whose endpoint address (.2 of the /30) is ip, or false when ip is not
// an endpoint address of the pool.
func (h *Host) slotOf(ip netip.Addr) (int, bool) {
	if !ip.Is4() || !h.cfg.Pool.Contains(ip) {
		return 0, false
	}
	a, b := ip.As4(), h.cfg.Pool.Addr().As4()
	off := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) -
		(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]))
	if off%4 != 2 {
		return 0, false
	}
	return int(off / 4), true
}

// sweepKeeping is New's sweep: it removes every veth and namespace of this Tag except the pairs
// (one token, the veth carrying the .1 of a /30 whose .2 is in keep, and its namespace) of the
// addresses in keep, and reserves the slot of every address in keep, found or not (a placeholder
// without a token when its kernel state is gone: Adopt then refuses it). Called before any
// Attach, with h.mu not needed.
func (h *Host) sweepKeeping(keep []netip.Addr) {
	want := map[netip.Addr]bool{}
	for _, a := range keep {
		want[a] = true
	}
	kept := map[string]bool{} // tokens
	links, err := netlink.LinkList()
	if err == nil {
		for _, l := range links {
			name := l.Attrs().Name
			if !isOurs(name, h.vethPrefix()) {
				continue
			}
			token := name[len(h.vethPrefix()):]
			if ep := h.keepLink(l, token, want); ep != nil {
				h.slots[ep.slot], h.kept[ep.ip] = ep, ep
				kept[token] = true
				continue
			}
			if err := netlink.LinkDel(l); err != nil {
				h.log.Warn("sweeping veth", "veth", name, "err", err)
			}
		}
	}
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		if isOurs(e.Name(), h.nsPrefix()) && !kept[e.Name()[len(h.nsPrefix()):]] {
			if err := deleteNetNS(filepath.Join(netnsDir, e.Name())); err != nil {
				h.log.Warn("sweeping netns", "netns", e.Name(), "err", err)
			}
		}
	}
	for a := range want {
		slot, ok := h.slotOf(a)
		if !ok {
			h.log.Warn("not keeping an address outside the pool", "address", a, "pool", h.cfg.Pool)
			continue
		}
		if _, taken := h.slots[slot]; !taken {
			ep := h.keptEndpoint("", slot, a.Prev())
			h.slots[slot], h.kept[a] = ep, ep
		}
	}
}

// keepLink returns the kept Endpoint of veth l (token) when it carries exactly one IPv4 address,
// the .1 of a /30 of the pool whose .2 is in want, and its namespace is there; nil otherwise.
func (h *Host) keepLink(l netlink.Link, token string, want map[netip.Addr]bool) *Endpoint {
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil || len(addrs) != 1 {
		return nil
	}
	hostIP, ok := netip.AddrFromSlice(addrs[0].IP.To4())
	if !ok || !want[hostIP.Next()] {
		return nil
	}
	slot, ok := h.slotOf(hostIP.Next())
	if !ok {
		return nil
	}
	if _, err := os.Stat(filepath.Join(netnsDir, h.nsPrefix()+token)); err != nil {
		return nil
	}
	return h.keptEndpoint(token, slot, hostIP)
}

// Adopt rebuilds the Endpoint whose address is ip from what New kept (Config.Keep): it checks
// that the namespace holds InsideIf and the host-side veth is up with the /30's host address,
// then installs spec's rules and starts the DNS forwarder. The returned Endpoint is like one
// Attach made (Close removes it). On error the kept state is removed and the address freed.
//
// Errors: ErrInvalidArgument (spec, Validate); ErrNotFound when New kept nothing for ip (not
// in Config.Keep, or already adopted or released) or its veth or namespace did not survive;
// otherwise the kernel's error, wrapped.
func (h *Host) Adopt(ctx context.Context, ip netip.Addr, spec EndpointSpec) (_ *Endpoint, err error) {
	if err := h.Validate(spec); err != nil {
		return nil, err
	}
	h.mu.Lock()
	ep := h.kept[ip]
	delete(h.kept, ip)
	h.mu.Unlock()
	if ep == nil {
		return nil, fmt.Errorf("adopting the network of %s: no kept endpoint has address %s: %w", spec.ID, ip, errdefs.ErrNotFound)
	}
	ep.spec = spec
	ep.spec.Allow, ep.spec.Deny = masked(spec.Allow), masked(spec.Deny)
	if ep.token == "" {
		h.release(ep)
		return nil, fmt.Errorf("adopting the network of %s: its veth and namespace (address %s) did not survive: %w", spec.ID, ip, errdefs.ErrNotFound)
	}
	defer func() {
		if err != nil {
			_ = ep.Close(ctx)
		}
	}()
	if ep.mac, err = ep.checkKernelState(); err != nil {
		return nil, fmt.Errorf("adopting the network of %s: %w", spec.ID, err)
	}
	if err := h.addEndpointRules(ep); err != nil {
		return nil, fmt.Errorf("adopting the network of %s: adding nftables rules: %w", spec.ID, err)
	}
	if ep.dns, err = startForwarder(ep.hostIP, h.upstream, h.log); err != nil {
		return nil, fmt.Errorf("adopting the network of %s: starting dns forwarder: %w", spec.ID, err)
	}
	return ep, nil
}

// checkKernelState verifies the kept veth (up, carrying hostIP) and that the namespace holds
// InsideIf, and returns InsideIf's MAC. Errors wrap ErrNotFound for a missing piece.
func (e *Endpoint) checkKernelState() (net.HardwareAddr, error) {
	l, err := netlink.LinkByName(e.hostIf)
	if err != nil {
		return nil, fmt.Errorf("veth %s is gone: %w", e.hostIf, errdefs.ErrNotFound)
	}
	if l.Attrs().OperState == netlink.OperDown {
		return nil, fmt.Errorf("veth %s is down (its peer is gone): %w", e.hostIf, errdefs.ErrNotFound)
	}
	nsFile, err := os.Open(e.NetNSPath())
	if err != nil {
		return nil, fmt.Errorf("opening its netns: %w: %w", err, errdefs.ErrNotFound)
	}
	defer nsFile.Close()
	nh, err := netlink.NewHandleAt(netnsHandle(nsFile))
	if err != nil {
		return nil, fmt.Errorf("entering its netns: %w", err)
	}
	defer nh.Close()
	in, err := nh.LinkByName(InsideIf)
	if err != nil {
		return nil, fmt.Errorf("its netns has no %s: %w", InsideIf, errdefs.ErrNotFound)
	}
	return in.Attrs().HardwareAddr, nil
}

// ReleaseKept removes the veths and namespaces New kept that nobody adopted, and frees their
// addresses. Call it once adoption is over (not when it was interrupted: the next daemon may
// adopt them). Errors are joined; the rest still runs.
func (h *Host) ReleaseKept(ctx context.Context) error {
	h.mu.Lock()
	eps := make([]*Endpoint, 0, len(h.kept))
	for ip, ep := range h.kept {
		eps = append(eps, ep)
		delete(h.kept, ip)
	}
	h.mu.Unlock()
	var errs []error
	for _, ep := range eps {
		if ep.token == "" {
			h.release(ep)
			continue
		}
		errs = append(errs, ep.Close(ctx))
	}
	return errors.Join(errs...)
}

// Detach forgets e without removing anything of it from the kernel: its DNS forwarder stops,
// its address is no longer this Host's, Close and Host.Close leave its veth, namespace and
// rules (and Host.Close the table) for the next daemon to adopt. For an instance that outlives
// the daemon. Idempotent; after it Close does nothing.
func (e *Endpoint) Detach() {
	e.once.Do(func() {
		if e.dns != nil {
			e.dns.close()
		}
		e.h.mu.Lock()
		defer e.h.mu.Unlock()
		if e.h.slots[e.slot] == e {
			delete(e.h.slots, e.slot)
		}
		e.h.left[e.token] = true
	})
}

// DialTCP connects from the host to port on e's own address through e's host-side veth only
// (SO_BINDTODEVICE, from Gateway): never through the host's other routes, so that it reaches
// e's instance or nothing. Errors: ErrFailedPrecondition after Close or Detach, or when the
// veth is gone; otherwise the dial's error.
func (e *Endpoint) DialTCP(ctx context.Context, port int) (net.Conn, error) {
	e.h.mu.Lock()
	live := e.h.slots[e.slot] == e
	e.h.mu.Unlock()
	if !live {
		return nil, fmt.Errorf("endpoint of %s is closed: %w", e.spec.ID, errdefs.ErrFailedPrecondition)
	}
	d := net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.IP(e.hostIP.AsSlice())},
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) { serr = unix.BindToDevice(int(fd), e.hostIf) }); err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("binding to veth %s: %w: %w", e.hostIf, serr, errdefs.ErrFailedPrecondition)
			}
			return nil
		},
	}
	return d.DialContext(ctx, "tcp4", net.JoinHostPort(e.ip.String(), strconv.Itoa(port)))
}
