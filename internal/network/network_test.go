package network_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/network"
	"github.com/zygo-run/zygo/internal/network/nettest"
)

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("network tests need root (CAP_NET_ADMIN): run them as root")
	}
}

// newHost makes a Host with a tag and pool of this test's own, all of whose
// outside traffic is routed to th.
func newHost(t *testing.T, th *nettest.Host, extra ...netip.Prefix) (*network.Host, network.Config) {
	cfg := network.Config{Pool: nettest.Pool(), Tag: nettest.Tag(), DNS: []netip.Addr{th.IP}, Forbidden: extra}
	th.RouteFrom(t, cfg.Pool)
	h, err := network.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h, cfg
}

func attach(t *testing.T, h *network.Host, spec network.EndpointSpec) *network.Endpoint {
	ep, err := h.Attach(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close(context.Background()) })
	return ep
}

// dial opens a TCP connection from inside ep's namespace.
func dial(ep *network.Endpoint, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return nettest.In(ep.NetNSPath(), func() error {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp4", addr)
		if err == nil {
			c.Close()
		}
		return err
	})
}

func get(t *testing.T, ep *network.Endpoint, url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return nettest.Get(ctx, ep.NetNSPath(), url)
}

// resolve asks the endpoint's resolver (its resolv.conf's nameserver).
func resolve(t *testing.T, ep *network.Endpoint, name string) ([]string, error) {
	ns := strings.Fields(ep.ResolvConf())[1]
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var c net.Conn
		err := nettest.In(ep.NetNSPath(), func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, "udp4", ns+":53")
			return err
		})
		return c, err
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.LookupHost(ctx, name)
}

func TestEgressReachesTestHostByNameAndIP(t *testing.T) {
	needRoot(t)
	th := nettest.NewHost(t)
	h, _ := newHost(t, th)
	ep := attach(t, h, network.EndpointSpec{ID: "a", Egress: true})
	if body, err := get(t, ep, "http://"+th.IP.String()+"/"); err != nil || body != th.Body {
		t.Fatalf("GET by IP = %q, %v; want %q", body, err, th.Body)
	}
	addrs, err := resolve(t, ep, "api."+th.Domain)
	if err != nil || len(addrs) != 1 || addrs[0] != th.IP.String() {
		t.Fatalf("resolving api.%s = %v, %v; want [%s]", th.Domain, addrs, err, th.IP)
	}
	if ep.MAC()[0]&0x03 != 0x02 {
		t.Errorf("MAC %s is not locally administered unicast", ep.MAC())
	}
}

func TestForbiddenDestinationsAreRefused(t *testing.T) {
	needRoot(t)
	th := nettest.NewHost(t)
	metadata := netip.MustParseAddr("169.254.169.254")
	th.AddAddr(t, metadata)
	h, _ := newHost(t, th)
	ep := attach(t, h, network.EndpointSpec{ID: "a", Egress: true})
	other := attach(t, h, network.EndpointSpec{ID: "b", Egress: true})

	// A listener on every host address, as the daemon's TCP API may be.
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	hostAddr := func(a netip.Addr) string { return netip.AddrPortFrom(a, uint16(port)).String() }
	// Sanity: the listener is reachable from the host, so a refusal below is the filter's.
	if c, err := net.Dial("tcp4", hostAddr(ep.Gateway())); err != nil {
		t.Fatalf("host cannot reach its own listener: %v", err)
	} else {
		c.Close()
	}
	// Another endpoint's server, reachable from inside it.
	var oln net.Listener
	if err := nettest.In(other.NetNSPath(), func() (err error) { oln, err = net.Listen("tcp4", ":8080"); return }); err != nil {
		t.Fatal(err)
	}
	defer oln.Close()
	go func() {
		for c, err := oln.Accept(); err == nil; c, err = oln.Accept() {
			c.Close()
		}
	}()
	if err := dial(other, "127.0.0.1:8080"); err != nil {
		t.Fatalf("endpoint b cannot reach its own server: %v", err)
	}

	for name, addr := range map[string]string{
		"host side of the veth": hostAddr(ep.Gateway()),
		"another host address":  hostAddr(th.Peer),
		"another endpoint":      netip.AddrPortFrom(other.IP().Addr(), 8080).String(),
		"metadata":              netip.AddrPortFrom(metadata, 80).String(),
	} {
		if err := dial(ep, addr); err == nil {
			t.Errorf("%s (%s): connected, want refused", name, addr)
		}
	}
	// Loopback inside is the endpoint's own: the host's listener is not there.
	if err := dial(ep, "127.0.0.1:"+itoa(port)); err == nil {
		t.Errorf("127.0.0.1:%d from inside reached the host's listener", port)
	}
	if _, err := get(t, ep, "http://"+th.IP.String()+"/"); err != nil {
		t.Errorf("the allowed test host is not reachable: %v", err)
	}
}

func itoa(n int) string {
	return netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(n)).String()[len("0.0.0.0:"):]
}

func TestAllowDenyAndEgressOff(t *testing.T) {
	needRoot(t)
	th := nettest.NewHost(t)
	second := netip.AddrFrom4([4]byte{198, 19, th.IP.As4()[2], th.IP.As4()[3]}) // unique as the test host's own /30 is
	th.AddAddr(t, second)
	h, _ := newHost(t, th)
	url := func(a netip.Addr) string { return "http://" + a.String() + "/" }
	cases := []struct {
		name       string
		spec       network.EndpointSpec
		first, sec bool
	}{
		{"open", network.EndpointSpec{Egress: true}, true, true},
		{"deny", network.EndpointSpec{Egress: true, Deny: []netip.Prefix{netip.PrefixFrom(second, 32)}}, true, false},
		{"allow", network.EndpointSpec{Egress: true, Allow: []netip.Prefix{netip.PrefixFrom(th.IP, 32)}}, true, false},
		{"off", network.EndpointSpec{Egress: false}, false, false},
	}
	for _, c := range cases {
		c.spec.ID = c.name
		ep := attach(t, h, c.spec)
		for _, x := range []struct {
			a    netip.Addr
			want bool
		}{{th.IP, c.first}, {second, c.sec}} {
			_, err := get(t, ep, url(x.a))
			if (err == nil) != x.want {
				t.Errorf("%s: GET %s: err=%v, want reachable=%v", c.name, x.a, err, x.want)
			}
		}
	}
}

func TestBadInputIsInvalidArgument(t *testing.T) {
	needRoot(t)
	th := nettest.NewHost(t)
	h, _ := newHost(t, th)
	for _, spec := range []network.EndpointSpec{
		{Egress: true, Allow: []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16")}},
		{Egress: true, Allow: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}},
		{Egress: true, Allow: []netip.Prefix{{}}},
		{Egress: true, Deny: []netip.Prefix{netip.MustParsePrefix("::/0")}},
	} {
		_, err := h.Attach(context.Background(), spec)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "network.") {
			t.Errorf("Attach(%+v) = %v, want invalid argument naming the field", spec, err)
		}
	}
	if _, err := network.New(context.Background(), network.Config{Pool: netip.MustParsePrefix("169.254.0.0/16")}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("New with a forbidden pool = %v, want invalid argument", err)
	}
	assertNothingLeft(t, network.Config{Tag: "x"}) // nothing of a failed New
}

// assertNothingLeft checks that no veth, namespace or table of cfg's tag exists.
func assertNothingLeft(t *testing.T, cfg network.Config) {
	t.Helper()
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "zy"+cfg.Tag+"-") {
			t.Errorf("veth %s left behind", l.Attrs().Name)
		}
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "zygo"+cfg.Tag+"-") {
			t.Errorf("netns %s left behind", e.Name())
		}
	}
	if network.TableExists(t, "zygo"+cfg.Tag) {
		t.Errorf("nftables table zygo%s left behind", cfg.Tag)
	}
}

func TestNothingLeftBehind(t *testing.T) {
	needRoot(t)
	th := nettest.NewHost(t)
	h, cfg := newHost(t, th)
	ep := attach(t, h, network.EndpointSpec{ID: "a", Egress: true})
	attach(t, h, network.EndpointSpec{ID: "b", Egress: true})
	if _, err := os.Stat(ep.NetNSPath()); err != nil {
		t.Fatal(err)
	}
	if err := ep.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(ep.HostIf()); err == nil {
		t.Errorf("veth %s still there after Close", ep.HostIf())
	}
	if _, err := os.Stat(ep.NetNSPath()); err == nil {
		t.Errorf("netns still there after Close")
	}
	// A daemon that died with "b" attached: the next New sweeps it.
	h2, err := network.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, cfg)
	// A failed attach (its address is taken on the host) leaves nothing.
	h3, err := network.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h3.Close(context.Background())
	network.FailNextAttach(h3)
	if _, err := h3.Attach(context.Background(), network.EndpointSpec{ID: "c", Egress: true}); err == nil {
		t.Fatal("injected failure: Attach succeeded")
	}
	links, _ := netlink.LinkList()
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "zy"+cfg.Tag+"-") {
			t.Errorf("veth %s left behind by a failed attach", l.Attrs().Name)
		}
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "zygo"+cfg.Tag+"-") {
			t.Errorf("netns %s left behind by a failed attach", e.Name())
		}
	}
}

// TestForwarderIsNotAnOpenResolver: an outside host that routes to the pool
// gets no answer from an endpoint's DNS forwarder (it answers endpoints only),
// while the endpoint itself still resolves.
func TestForwarderIsNotAnOpenResolver(t *testing.T) {
	needRoot(t)
	th := nettest.NewHost(t)
	h, cfg := newHost(t, th)
	ep := attach(t, h, network.EndpointSpec{ID: "a", Egress: true})
	if _, err := resolve(t, ep, "api."+th.Domain); err != nil {
		t.Fatalf("the endpoint cannot resolve: %v", err)
	}
	if out, err := exec.Command("ip", "-n", th.NetNS, "route", "add", cfg.Pool.String(), "via", th.Peer.String()).CombinedOutput(); err != nil {
		t.Fatalf("routing the test host to the pool: %v: %s", err, out)
	}
	ns := strings.Fields(ep.ResolvConf())[1]
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var c net.Conn
		err := nettest.In("/run/netns/"+th.NetNS, func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, "udp4", ns+":53")
			return err
		})
		return c, err
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if addrs, err := r.LookupHost(ctx, "api."+th.Domain); err == nil {
		t.Errorf("an outside host resolved through the forwarder at %s: %v", ns, addrs)
	}
}

// TestPoolOverlappingTheHostIsRefused: New refuses a pool that overlaps a
// route or address the host already has (it would shadow that network), and
// leaves nothing.
func TestPoolOverlappingTheHostIsRefused(t *testing.T) {
	needRoot(t)
	pool := nettest.Pool()
	name := "ztd-" + nettest.Tag()
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", name).Run() })
	for _, args := range [][]string{{"link", "add", name, "type", "veth", "peer", "name", name + "p"}, {"addr", "add", pool.Addr().Next().String() + "/24", "dev", name}, {"link", "set", name, "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	cfg := network.Config{Pool: pool, Tag: nettest.Tag()}
	h, err := network.New(context.Background(), cfg)
	if err == nil {
		h.Close(context.Background())
		t.Fatalf("New with a pool overlapping %s's %s succeeded", name, pool)
	}
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), pool.String()) {
		t.Errorf("New = %v, want failed precondition naming the pool", err)
	}
	assertNothingLeft(t, cfg)
}

// TestListsAreBoundedAndHostAddressesRefused: allow and deny take at most
// MaxListEntries each (every entry is a rule of one netlink batch), and an
// allow naming one of the host's own addresses is refused; both name the
// field, and nothing is left.
func TestListsAreBoundedAndHostAddressesRefused(t *testing.T) {
	needRoot(t)
	th := nettest.NewHost(t)
	h, cfg := newHost(t, th)
	many := make([]netip.Prefix, network.MaxListEntries+1)
	for i := range many {
		many[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, byte(i / 256), byte(i)}), 32)
	}
	for _, spec := range []network.EndpointSpec{
		{ID: "a", Egress: true, Allow: many},
		{ID: "b", Egress: true, Deny: many},
		{ID: "c", Egress: true, Allow: []netip.Prefix{netip.PrefixFrom(th.Peer, 32)}},
	} {
		_, err := h.Attach(context.Background(), spec)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "network.") {
			t.Errorf("Attach(%s) = %v, want invalid argument naming the field", spec.ID, err)
		}
	}
	max := network.EndpointSpec{ID: "d", Egress: true, Allow: many[:network.MaxListEntries], Deny: many[:network.MaxListEntries]}
	ep := attach(t, h, max)
	if err := ep.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.Close(context.Background())
	assertNothingLeft(t, cfg)
}
