package sandbox

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/network"
)

// Network modes of CreateOptions.Network.Mode.
const (
	// NetworkNone: loopback only.
	NetworkNone = "none"
	// NetworkEgress: an interface of its own with an address of its own, NAT to the outside
	// through the host, whatever the allow and deny lists permit; never the host itself, other
	// sandboxes or functions, or link-local and metadata ranges (internal/network).
	NetworkEgress = "egress"
)

// NetworkOptions is a sandbox's network. Forks and rollbacks inherit it; each copy gets an
// endpoint (namespace, address, MAC) of its own.
type NetworkOptions struct {
	// Mode is NetworkNone or NetworkEgress; "" at create is NetworkEgress on a Manager with a
	// Network, NetworkNone on one without.
	Mode string `json:"mode,omitempty"`
	// Allow, when not empty, are the only IPv4 CIDRs the sandbox may reach; Deny are refused
	// even inside Allow.
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// NetIdentity is the network identity of a sandbox's current instance: the address and MAC
// its interface has, inside and as the host sees it. Nil for a sandbox without network.
type NetIdentity struct {
	Address string `json:"address"` // "10.213.0.6"
	MAC     string `json:"mac"`     // "02:…"
}

// Networker gives engine instances their network; the daemon's is internal/network's Host
// (NetworkerOf). Safe for concurrent use.
type Networker interface {
	// Attach makes the endpoint of one engine instance: a namespace of its own with one
	// interface, a fresh address and MAC, and the host's filter for opts. The caller closes
	// it once the instance is destroyed. Errors: errdefs.ErrInvalidArgument naming the field
	// for a bad list; errdefs.ErrUnavailable when no address is left.
	Attach(ctx context.Context, engineID string, opts NetworkOptions) (NetEndpoint, error)
	// Adopt takes back the endpoint an instance that outlived the previous daemon still runs
	// in (held: its recorded identity), with the filter of opts again. Errors:
	// errdefs.ErrNotFound when that endpoint did not survive; the instance must then not run on.
	Adopt(ctx context.Context, engineID string, opts NetworkOptions, held NetIdentity) (NetEndpoint, error)
	// ReleaseKept removes and frees what was kept for adoption and not adopted; called once
	// recovery is over.
	ReleaseKept(ctx context.Context) error
}

// NetEndpoint is one instance's endpoint.
type NetEndpoint interface {
	// Attachment is what the backend needs to run the instance in it.
	Attachment() *NetAttachment
	// Identity is its address and MAC.
	Identity() NetIdentity
	// DialTCP connects to port on the instance through this endpoint only (never by its
	// address through the host's routes). Errors: errdefs.ErrFailedPrecondition once closed.
	DialTCP(ctx context.Context, port int) (net.Conn, error)
	// Close removes the endpoint (idempotent). Processes must have left the namespace.
	Close(ctx context.Context) error
	// Detach forgets the endpoint and leaves it in the kernel, for an instance that outlives
	// the daemon (the next one adopts it). Close then does nothing.
	Detach()
}

// parsePrefixes parses list as IPv4 CIDRs, naming field[i] in the error.
func parsePrefixes(field string, list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for i, s := range list {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil || !p.Addr().Is4() {
			return nil, invalid(fmt.Sprintf("%s[%d]", field, i), "%s is not an IPv4 CIDR such as 10.1.0.0/16", short(s))
		}
		out = append(out, p)
	}
	return out, nil
}

// maxNetworkRules bounds each of the allow and deny lists.
const maxNetworkRules = 256

// validateNetwork checks n's shape: the mode, and the lists as IPv4 CIDRs none of which opens a
// range no sandbox may reach (network.ValidateLists). Errors wrap errdefs.ErrInvalidArgument
// and name the field ("network.allow[1]").
func validateNetwork(n NetworkOptions) error {
	switch n.Mode {
	case "", NetworkNone, NetworkEgress:
	default:
		return invalid("network.mode", "%s: want %q or %q", short(n.Mode), NetworkNone, NetworkEgress)
	}
	if n.Mode == NetworkNone && (len(n.Allow) > 0 || len(n.Deny) > 0) {
		return invalid("network.allow", "allow and deny lists need network mode %q", NetworkEgress)
	}
	if len(n.Allow) > maxNetworkRules || len(n.Deny) > maxNetworkRules {
		return invalid("network.allow", "at most %d CIDRs in each of allow and deny", maxNetworkRules)
	}
	allow, err := parsePrefixes("network.allow", n.Allow)
	if err != nil {
		return err
	}
	deny, err := parsePrefixes("network.deny", n.Deny)
	if err != nil {
		return err
	}
	return network.ValidateLists(allow, deny, nil)
}

// networkDefaults returns n with its mode filled in for this Manager, or an error wrapping
// errdefs.ErrFailedPrecondition when it asks for egress on a Manager without a Network.
func (m *Manager) networkDefaults(n NetworkOptions) (NetworkOptions, error) {
	if n.Mode == "" {
		n.Mode = NetworkNone
		if m.cfg.Network != nil {
			n.Mode = NetworkEgress
		}
	}
	if n.Mode == NetworkEgress && m.cfg.Network == nil {
		return n, fmt.Errorf("network.mode %q: this daemon runs sandboxes without network (it could not set up the "+
			"host's side; see its log), create with network mode %q: %w", NetworkEgress, NetworkNone, errdefs.ErrFailedPrecondition)
	}
	return n, nil
}

// attachNet makes the endpoint of engine instance engineID when opts asks for a network, and
// keeps it until destroyEngine. It returns nil, nil for none.
func (m *Manager) attachNet(ctx context.Context, engineID string, opts NetworkOptions) (*NetAttachment, *NetIdentity, error) {
	if opts.Mode != NetworkEgress {
		return nil, nil, nil
	}
	if m.cfg.Network == nil {
		return nil, nil, fmt.Errorf("the sandbox has network %q but this daemon has none: %w", opts.Mode, errdefs.ErrFailedPrecondition)
	}
	ep, err := m.cfg.Network.Attach(ctx, engineID, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("attaching the network of %s: %w", engineID, err)
	}
	m.netMu.Lock()
	m.nets[engineID] = ep
	m.netMu.Unlock()
	id := ep.Identity()
	return ep.Attachment(), &id, nil
}

// adoptNet takes back the endpoint of rec's instance after a daemon restart, when rec has a
// network, and keeps it until destroyEngine. Errors (the instance must not run on without
// it): errdefs.ErrFailedPrecondition when this daemon has no network, the Networker's
// otherwise.
func (m *Manager) adoptNet(ctx context.Context, rec SandboxRecord) error {
	if rec.Options.Network.Mode != NetworkEgress || rec.Net == nil {
		return nil
	}
	if m.cfg.Network == nil {
		return fmt.Errorf("the sandbox has network %q but this daemon has none: %w", rec.Options.Network.Mode, errdefs.ErrFailedPrecondition)
	}
	ep, err := m.cfg.Network.Adopt(ctx, rec.EngineID, rec.Options.Network, *rec.Net)
	if err != nil {
		return err
	}
	if got := ep.Identity(); got.Address != rec.Net.Address || !strings.EqualFold(got.MAC, rec.Net.MAC) {
		_ = ep.Close(ctx)
		return fmt.Errorf("the kept endpoint has address %s and MAC %s, the record %s and %s", got.Address, got.MAC, rec.Net.Address, rec.Net.MAC)
	}
	m.netMu.Lock()
	m.nets[rec.EngineID] = ep
	m.netMu.Unlock()
	return nil
}

// liveNet returns the endpoint the Manager holds for engine instance engineID, or nil.
func (m *Manager) liveNet(engineID string) NetEndpoint {
	m.netMu.Lock()
	defer m.netMu.Unlock()
	return m.nets[engineID]
}

// detachNets forgets every endpoint, leaving them to the instances, which outlive the Manager.
func (m *Manager) detachNets() {
	m.netMu.Lock()
	defer m.netMu.Unlock()
	for id, ep := range m.nets {
		ep.Detach()
		delete(m.nets, id)
	}
}

// destroyEngine destroys engine instance id on be, then closes its network endpoint, if any
// (after: the instance's processes hold the namespace). Idempotent.
func (m *Manager) destroyEngine(ctx context.Context, be Backend, id string) error {
	if err := be.Destroy(ctx, id); err != nil {
		return err
	}
	m.netMu.Lock()
	ep := m.nets[id]
	delete(m.nets, id)
	m.netMu.Unlock()
	if ep != nil {
		return ep.Close(ctx)
	}
	return nil
}

// checkNetIdentity is the network step of reseal: the copy must see, on its one interface,
// exactly the MAC and address the host gave it (want), and nothing of the image's. It returns
// an error (the copy is destroyed) otherwise.
func checkNetIdentity(want *NetIdentity, seen []guest.Interface) error {
	if want == nil {
		if len(seen) > 0 {
			return fmt.Errorf("a copy without network sees interface %s", seen[0].Name)
		}
		return nil
	}
	if len(seen) != 1 {
		return fmt.Errorf("the copy sees %d network interfaces besides loopback, want 1", len(seen))
	}
	mac, err := net.ParseMAC(seen[0].MAC)
	if err != nil || !strings.EqualFold(mac.String(), want.MAC) {
		return fmt.Errorf("the copy's interface has MAC %.20q, want its own %s", seen[0].MAC, want.MAC)
	}
	var addrs []string
	for _, a := range seen[0].Addrs {
		if p, err := netip.ParsePrefix(a); err == nil && p.Addr().Is4() {
			addrs = append(addrs, p.Addr().String())
		}
	}
	if !slices.Equal(addrs, []string{want.Address}) {
		return fmt.Errorf("the copy's interface has IPv4 addresses %.80q, want only its own %s", addrs, want.Address)
	}
	return nil
}

// HostNetwork is the Networker on internal/network's Host (the daemon's).
type HostNetwork struct{ Host *network.Host }

var _ Networker = HostNetwork{}

// Attach implements Networker.
func (h HostNetwork) Attach(ctx context.Context, engineID string, opts NetworkOptions) (NetEndpoint, error) {
	allow, err := parsePrefixes("network.allow", opts.Allow)
	if err != nil {
		return nil, err
	}
	deny, err := parsePrefixes("network.deny", opts.Deny)
	if err != nil {
		return nil, err
	}
	ep, err := h.Host.Attach(ctx, network.EndpointSpec{ID: engineID, Egress: opts.Mode == NetworkEgress, Allow: allow, Deny: deny})
	if err != nil {
		return nil, err
	}
	return hostEndpoint{ep}, nil
}

// Adopt implements Networker: the endpoint network.New kept for held.Address
// (network.Config.Keep).
func (h HostNetwork) Adopt(ctx context.Context, engineID string, opts NetworkOptions, held NetIdentity) (NetEndpoint, error) {
	ip, err := netip.ParseAddr(held.Address)
	if err != nil {
		return nil, fmt.Errorf("the recorded address %.40q: %w", held.Address, errdefs.ErrNotFound)
	}
	allow, err := parsePrefixes("network.allow", opts.Allow)
	if err != nil {
		return nil, err
	}
	deny, err := parsePrefixes("network.deny", opts.Deny)
	if err != nil {
		return nil, err
	}
	ep, err := h.Host.Adopt(ctx, ip, network.EndpointSpec{ID: engineID, Egress: opts.Mode == NetworkEgress, Allow: allow, Deny: deny})
	if err != nil {
		return nil, err
	}
	return hostEndpoint{ep}, nil
}

// ReleaseKept implements Networker.
func (h HostNetwork) ReleaseKept(ctx context.Context) error { return h.Host.ReleaseKept(ctx) }

type hostEndpoint struct{ *network.Endpoint }

func (e hostEndpoint) Attachment() *NetAttachment {
	return &NetAttachment{NetnsPath: e.NetNSPath(), ResolvConf: []byte(e.ResolvConf())}
}

func (e hostEndpoint) Identity() NetIdentity {
	return NetIdentity{Address: e.IP().Addr().String(), MAC: e.MAC().String()}
}
