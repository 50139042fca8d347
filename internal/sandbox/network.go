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
}

// NetEndpoint is one instance's endpoint.
type NetEndpoint interface {
	// Attachment is what the backend needs to run the instance in it.
	Attachment() *NetAttachment
	// Identity is its address and MAC.
	Identity() NetIdentity
	// Close removes the endpoint (idempotent). Processes must have left the namespace.
	Close(ctx context.Context) error
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

type hostEndpoint struct{ *network.Endpoint }

func (e hostEndpoint) Attachment() *NetAttachment {
	return &NetAttachment{NetnsPath: e.NetNSPath(), ResolvConf: []byte(e.ResolvConf())}
}

func (e hostEndpoint) Identity() NetIdentity {
	return NetIdentity{Address: e.IP().Addr().String(), MAC: e.MAC().String()}
}
