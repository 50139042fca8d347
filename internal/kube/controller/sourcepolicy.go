package controller

// The address policy of Function sources (spec.source.url and spec.source.oci): which
// addresses the controller may connect to on a tenant's behalf. The check runs at dial time
// on the address the connection is really made to (net.Dialer.Control), after DNS, so a name
// that resolves (or re-resolves) to a refused address is refused too, and so is every
// redirect's target.

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// defaultSourceDeny are the addresses a Function source may not reach unless the operator
// allows them (--source-allow-cidr), with the reason a refusal gives: loopback (the
// controller's own pod), link-local (where cloud metadata services answer, 169.254.169.254)
// and unspecified.
var defaultSourceDeny = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local, where cloud metadata services answer"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
}

// SourcePolicy says which addresses a Function's source may be fetched from. An address in
// Allow is allowed; else one that is loopback, link-local or unspecified (defaultSourceDeny)
// or in Deny is refused; else it is allowed. The zero SourcePolicy refuses the defaults only. It is read-only once in use.
type SourcePolicy struct {
	Allow []netip.Prefix // --source-allow-cidr: exceptions to the refusals (e.g. 127.0.0.0/8 for a registry on the node)
	Deny  []netip.Prefix // --source-deny-cidr: refused besides DefaultSourceDeny (e.g. the cluster's pod and service ranges)
}

// ParseCIDRs parses the values of --source-allow-cidr or --source-deny-cidr (flag names it in
// the error); a bare address is its /32 or /128.
func ParseCIDRs(flag string, vals []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(vals))
	for _, v := range vals {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			a, aerr := netip.ParseAddr(v)
			if aerr != nil {
				return nil, fmt.Errorf("%s %q: not a CIDR (10.0.0.0/8) or an address: %w", flag, v, err)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// errAddressRefused is the error of a dial the policy refuses.
type errAddressRefused struct {
	addr   netip.Addr
	reason string // "loopback", "link-local", ..., or "denied by --source-deny-cidr"
}

func (e *errAddressRefused) Error() string {
	return fmt.Sprintf("address %s is refused (%s): the controller does not fetch sources from it unless --source-allow-cidr allows it", e.addr, e.reason)
}

// check returns nil when a may be connected to, else an *errAddressRefused.
func (p *SourcePolicy) check(a netip.Addr) error {
	a = a.Unmap()
	for _, pr := range p.Allow {
		if pr.Contains(a) {
			return nil
		}
	}
	for _, d := range defaultSourceDeny {
		if d.prefix.Contains(a) {
			return &errAddressRefused{a, d.reason}
		}
	}
	for _, pr := range p.Deny {
		if pr.Contains(a) {
			return &errAddressRefused{a, "in --source-deny-cidr " + pr.String()}
		}
	}
	return nil
}

// control is a net.Dialer.Control refusing the addresses p refuses.
func (p *SourcePolicy) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("source address policy: %q: %w", address, err)
	}
	return p.check(ap.Addr())
}

// refusedAddress returns the policy's refusal in err's chain, if there is one.
func refusedAddress(err error) (*errAddressRefused, bool) {
	var r *errAddressRefused
	ok := errors.As(err, &r)
	return r, ok
}

// newFetchClient returns a client for URL and OCI sources whose connect, TLS handshake and
// wait for the response headers each take at most d, so that a source that accepts and never
// answers fails in d, not after fetchTimeout; every connection is checked against p (nil: the
// zero SourcePolicy); the environment's proxy settings apply (then the proxy's address is the
// one checked).
func newFetchClient(d time.Duration, p *SourcePolicy) *http.Client {
	if p == nil {
		p = &SourcePolicy{}
	}
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: d, Control: p.control}).DialContext,
		TLSHandshakeTimeout:   d,
		ResponseHeaderTimeout: d,
		IdleConnTimeout:       90 * time.Second,
	}}
}
