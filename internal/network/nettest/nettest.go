// Package nettest makes test hosts for network tests: a network namespace
// joined to the root namespace by a veth pair, with an HTTP server and a DNS
// server inside it. Tests send traffic only to such hosts and to loopback,
// never off the machine. Needs root and iproute2 (`ip`).
package nettest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Host is a test host. Its servers answer until the test ends.
type Host struct {
	NetNS string     // its namespace's name (`ip netns exec NAME ...`)
	IP    netip.Addr // its address, in a random /30 of 198.18.0.0/16 (RFC 2544 benchmark range)
	Peer  netip.Addr // the root namespace's side of that /30
	// Domain is the zone its DNS server answers: every name under it is IP.
	Domain string
	// Body is what its HTTP server (port 80) answers to every request.
	Body string
}

// NewHost makes a test host and removes it when t ends. It fails t, saying
// how to install what is missing, when `ip` is not there.
func NewHost(t testing.TB) *Host {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("nettest: needs `ip` (Debian iproute2): run scripts/deps.sh")
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	// A random /30 of 198.18.0.0/16 (16,384 of them): test hosts of tests
	// running at once (go test runs packages in parallel) must not share one,
	// or the host's two routes to it would send one's replies to the other.
	third, fourth := b[1], b[2]&0xfc
	h := &Host{
		NetNS:  "zygotest-" + tok,
		IP:     netip.AddrFrom4([4]byte{198, 18, third, fourth + 2}),
		Peer:   netip.AddrFrom4([4]byte{198, 18, third, fourth + 1}),
		Domain: "zygo-" + tok + ".test",
		Body:   "hello from test host " + tok,
	}
	veth, inside := "zt-"+tok, "zti-"+tok
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", veth).Run()
		_ = exec.Command("ip", "netns", "del", h.NetNS).Run()
	})
	for _, args := range [][]string{
		{"netns", "add", h.NetNS},
		{"link", "add", veth, "type", "veth", "peer", "name", inside},
		{"link", "set", inside, "netns", h.NetNS},
		{"addr", "add", h.Peer.String() + "/30", "dev", veth},
		{"link", "set", veth, "up"},
		{"-n", h.NetNS, "addr", "add", h.IP.String() + "/30", "dev", inside},
		{"-n", h.NetNS, "link", "set", inside, "up"},
		{"-n", h.NetNS, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("nettest: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	var ln net.Listener
	var pc net.PacketConn
	err := In("/run/netns/"+h.NetNS, func() error {
		var err error
		if ln, err = net.Listen("tcp4", ":80"); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp4", h.IP.String()+":53")
		return err
	})
	if err != nil {
		t.Fatalf("nettest: listening in the test host: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, h.Body)
	})}
	go srv.Serve(ln)
	go h.serveDNS(pc)
	t.Cleanup(func() { srv.Close(); pc.Close() })
	return h
}

// In runs fn on an OS thread that has joined the network namespace at
// nsPath: sockets fn opens belong to that namespace (and keep working after
// In returns). The thread is thrown away if it cannot return.
func In(nsPath string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		target, err := netns.GetFromPath(nsPath)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			errc <- err
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- err // the thread stays locked and ends with this goroutine
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// serveDNS answers A queries for names under h.Domain with h.IP and
// everything else with NXDOMAIN, until pc is closed.
func (h *Host) serveDNS(pc net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if ans := h.answer(buf[:n]); ans != nil {
			_, _ = pc.WriteTo(ans, from)
		}
	}
}

func (h *Host) answer(q []byte) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:]) != 1 {
		return nil
	}
	var labels []string
	i := 12
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if l > 63 || i+1+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i+1:i+1+l]))
		i += 1 + l
	}
	if i+5 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i+1:])
	question := q[12 : i+5]
	name := strings.ToLower(strings.Join(labels, "."))
	resp := make([]byte, 12, 12+len(question)+16)
	copy(resp, q[:2])
	resp[2] = 0x84 | (q[2] & 0x01) // QR, AA, RD copied
	resp[3] = 0x80                 // RA
	binary.BigEndian.PutUint16(resp[4:], 1)
	resp = append(resp, question...)
	if name != h.Domain && !strings.HasSuffix(name, "."+h.Domain) {
		resp[3] |= 3 // NXDOMAIN
		return resp
	}
	if qtype == 1 {
		binary.BigEndian.PutUint16(resp[6:], 1)
		a := h.IP.As4()
		resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4)
		resp = append(resp, a[:]...)
	}
	return resp
}

// Get fetches url with a client whose sockets are made in the namespace at
// nsPath; it returns the body, or the dial/read error.
func Get(ctx context.Context, nsPath, url string) (string, error) {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := In(nsPath, func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return string(b), err
}

// AddAddr gives the test host a as a further address (on its loopback),
// served by the same HTTP server: a stand-in for a metadata service
// (169.254.169.254) or another outside address.
func (h *Host) AddAddr(t testing.TB, a netip.Addr) {
	t.Helper()
	if out, err := exec.Command("ip", "-n", h.NetNS, "addr", "add", a.String()+"/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("nettest: adding %s: %v: %s", a, err, out)
	}
}

// RouteFrom sends every packet whose source is in from (an endpoint pool)
// to the test host, through a policy-routing rule and table of its own that
// touch no other traffic: whatever a filter under test lets through ends at
// the test host, never off this machine. Removed when t ends.
func (h *Host) RouteFrom(t testing.TB, from netip.Prefix) {
	t.Helper()
	// One table per test host, numbered by its /30 (unique among hosts alive
	// at once); every pool routed to it shares that table's one route.
	table := fmt.Sprint(20000 + int(h.IP.As4()[2])*64 + int(h.IP.As4()[3])/4)
	del := func() {
		_ = exec.Command("ip", "rule", "del", "from", from.String(), "lookup", table).Run()
		_ = exec.Command("ip", "rule", "del", "to", from.String(), "lookup", "main").Run()
		_ = exec.Command("ip", "route", "flush", "table", table).Run()
	}
	t.Cleanup(del)
	for _, args := range [][]string{
		{"route", "replace", "default", "via", h.IP.String(), "table", table},
		{"rule", "add", "to", from.String(), "lookup", "main", "priority", "99"}, // the host's own replies to the pool
		{"rule", "add", "from", from.String(), "lookup", table, "priority", "100"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("nettest: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}

// Pool returns a random /24 of 10.128.0.0/9 for one test's endpoints (32,768 of them), one
// that no route or address of the host overlaps when it is drawn, so that the daemons of test
// packages running at once on one machine do not share addresses (with 10.222.0.0/16's 256,
// two packages' daemons drew the same one, and the second refused to start).
func Pool() netip.Prefix {
	taken := hostPrefixes()
	for range 64 {
		var b [2]byte
		_, _ = rand.Read(b[:])
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 128 | b[0]&0x7f, b[1], 0}), 24)
		if !overlapsAny(p, taken) {
			return p
		}
	}
	panic("nettest.Pool: no free /24 in 10.128.0.0/9 after 64 draws")
}

// hostPrefixes returns the IPv4 destinations of the host's routes (all tables) and the
// prefixes of its addresses; nil when they cannot be read.
func hostPrefixes() []netip.Prefix {
	var out []netip.Prefix
	routes, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		if p, ok := ipNetPrefix(r.Dst); ok && p.Bits() > 0 { // a default route overlaps all
			out = append(out, p)
		}
	}
	addrs, _ := netlink.AddrList(nil, netlink.FAMILY_V4)
	for _, a := range addrs {
		if p, ok := ipNetPrefix(a.IPNet); ok {
			out = append(out, p)
		}
	}
	return out
}

func ipNetPrefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP.To4())
	if !ok {
		return netip.Prefix{}, false
	}
	bits, _ := n.Mask.Size()
	return netip.PrefixFrom(a, bits).Masked(), true
}

func overlapsAny(p netip.Prefix, ps []netip.Prefix) bool {
	for _, q := range ps {
		if p.Overlaps(q) {
			return true
		}
	}
	return false
}

// Tag returns a random network.Config.Tag (4 lowercase letters).
func Tag() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = 'a' + b[i]%26
	}
	return string(b)
}
