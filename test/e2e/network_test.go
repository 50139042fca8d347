package e2e

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/zygo-run/zygo/internal/network/nettest"
	"github.com/zygo-run/zygo/test/e2eutil"
)

// netProbe is what testdata/net returns.
type netProbe struct {
	Self *struct {
		IP      string `json:"ip"`
		Gateway string `json:"gateway"`
	} `json:"self"`
	Connect map[string]string `json:"connect"`
	Get     map[string]string `json:"get"`
	Resolve map[string]any    `json:"resolve"`
}

// netFunction writes testdata/net as function name with the [network] table given.
func netFunction(t *testing.T, name, network string) string {
	t.Helper()
	main, err := os.ReadFile(filepath.Join(fixture("net"), "main.py"))
	if err != nil {
		t.Fatal(err)
	}
	return writeFunction(t, map[string]string{"main.py": string(main), "zygo.toml": `
name = "` + name + `"
runtime = "python"
handler = "main:handler"
` + network})
}

// startNetDaemon starts a daemon whose DNS forwarder asks th and all of
// whose endpoints' traffic is routed to th (nettest.RouteFrom), so that
// nothing a test function sends can leave this machine.
func startNetDaemon(t *testing.T, th *nettest.Host, stateDir string, tag, pool string, args ...string) *Daemon {
	t.Helper()
	requireTools(t)
	if stateDir == "" {
		stateDir = netStateDir(t)
	}
	p := &e2eutil.Process{T: t, Bin: zygoBin, StateDir: stateDir, NetTag: tag, NetPool: pool,
		Args: append([]string{"--network-dns", th.IP.String()}, args...)}
	d := &Daemon{t: t, Process: p}
	d.Start(20 * time.Second)
	t.Cleanup(d.Stop)
	return d
}

// netStateDir is a state dir the sandbox uids can traverse (t.TempDir's parent is 0700).
func netStateDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "zygo-e2e-state-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newNetHost(t *testing.T) (th *nettest.Host, tag, pool string) {
	if os.Geteuid() != 0 {
		t.Fatal("network e2e tests need root: run them as root")
	}
	th = nettest.NewHost(t)
	p := nettest.Pool()
	th.RouteFrom(t, p)
	return th, nettest.Tag(), p.String()
}

// leftovers lists the veths, namespaces and nftables table of tag.
func leftovers(t *testing.T, tag string) []string {
	t.Helper()
	var out []string
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "zy"+tag+"-") {
			out = append(out, "veth "+l.Attrs().Name)
		}
	}
	out = append(out, netnsOf(tag)...)
	if tableExists(t, "zygo"+tag) {
		out = append(out, "nft table zygo"+tag)
	}
	return out
}

func netnsOf(tag string) []string {
	var out []string
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "zygo"+tag+"-") {
			out = append(out, "netns "+e.Name())
		}
	}
	return out
}

// TestFunctionEgress (issue 14, points 1 and 3): a function with egress
// reaches a test host by IP and by name (through the daemon's DNS
// forwarder), and is refused, each proven separately, the host's own
// addresses (a host listener on every address and the daemon's TCP API
// listener), another function's namespace, 169.254.169.254 (served by the
// test host, so only the filter stands in the way), a denied CIDR and,
// with egress = "none", everything. Its loopback is its own.
func TestFunctionEgress(t *testing.T) {
	th, tag, pool := newNetHost(t)
	metadata := netip.MustParseAddr("169.254.169.254")
	th.AddAddr(t, metadata)
	second := netip.AddrFrom4([4]byte{198, 19, th.IP.As4()[2], th.IP.As4()[3]}) // unique as the test host's own /30 is
	th.AddAddr(t, second)
	d := startNetDaemon(t, th, "", tag, pool, "--listen", "127.0.0.1:0")
	d.Up(netFunction(t, "neta", "[network]\negress = \"allow\"\n"))
	d.Up(netFunction(t, "netb", "[network]\negress = \"allow\"\n"))
	d.Up(netFunction(t, "netdeny", "[network]\negress = \"allow\"\ndeny = [\""+second.String()+"/32\"]\n"))
	d.Up(netFunction(t, "netnone", ""))

	ln, err := net.Listen("tcp4", "0.0.0.0:0") // a host service on every host address
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for c, err := ln.Accept(); err == nil; c, err = ln.Accept() {
			c.Close()
		}
	}()
	hostPort := ln.Addr().(*net.TCPAddr).Port
	apiPort := listenPort(t, d)

	var b netProbe
	d.Invoke("netb", map[string]any{"self": true}, &b)
	// A server in netb's namespace, reachable from inside it.
	bNS := nsWithAddr(t, tag, b.Self.IP)
	var bln net.Listener
	if err := nettest.In(bNS, func() (err error) { bln, err = net.Listen("tcp4", ":8080"); return }); err != nil {
		t.Fatal(err)
	}
	defer bln.Close()
	go func() {
		for c, err := bln.Accept(); err == nil; c, err = bln.Accept() {
			c.Close()
		}
	}()
	var bl netProbe
	d.Invoke("netb", map[string]any{"connect": [][]any{{"127.0.0.1", 8080}}}, &bl)
	if got := bl.Connect["127.0.0.1:8080"]; got != "ok" {
		t.Fatalf("netb cannot reach a server in its own namespace: %s", got)
	}

	var a netProbe
	thURL, secondURL := "http://"+th.IP.String()+"/", "http://"+second.String()+"/"
	d.Invoke("neta", map[string]any{
		"self":    true,
		"get":     []string{thURL, "http://api." + th.Domain + "/", secondURL, "http://" + metadata.String() + "/"},
		"resolve": []string{"api." + th.Domain},
	}, &a)
	if a.Get[thURL] != th.Body || a.Get["http://api."+th.Domain+"/"] != th.Body || a.Get[secondURL] != th.Body {
		t.Errorf("neta GETs = %v; want the test host's body %q by IP, by name and at its second address", a.Get, th.Body)
	}
	if got := toString(a.Resolve["api."+th.Domain]); got != `["`+th.IP.String()+`"]` {
		t.Errorf("resolving api.%s = %s, want [%s]", th.Domain, got, th.IP)
	}
	if got := a.Get["http://"+metadata.String()+"/"]; got == th.Body {
		t.Errorf("neta reached the metadata address %s", metadata)
	}
	var r netProbe
	d.Invoke("neta", map[string]any{"connect": [][]any{
		{a.Self.Gateway, hostPort}, {th.Peer.String(), hostPort}, {a.Self.Gateway, apiPort},
		{"127.0.0.1", apiPort}, {b.Self.IP, 8080}, {"127.0.0.1", 8080},
	}}, &r)
	for addr, got := range r.Connect {
		if got == "ok" {
			t.Errorf("neta connected to %s, want refused (outcomes %v)", addr, r.Connect)
		}
	}
	// Sanity: the host service is there for the host itself.
	if c, err := net.Dial("tcp4", net.JoinHostPort(a.Self.Gateway, strconv.Itoa(hostPort))); err != nil {
		t.Fatalf("the host cannot reach its own listener: %v", err)
	} else {
		c.Close()
	}

	var dn netProbe
	d.Invoke("netdeny", map[string]any{"get": []string{thURL, secondURL}}, &dn)
	if dn.Get[thURL] != th.Body || dn.Get[secondURL] == th.Body {
		t.Errorf("netdeny GETs = %v; want the test host but not the denied %s", dn.Get, second)
	}
	var none netProbe
	d.Invoke("netnone", map[string]any{"get": []string{thURL}, "resolve": []string{"api." + th.Domain}}, &none)
	if none.Get[thURL] == th.Body || !strings.Contains(none.Get[thURL], "unreachable") {
		t.Errorf("egress = none: GET %s = %q, want network unreachable", thURL, none.Get[thURL])
	}
}

// listenPort returns the port of the daemon's --listen address, from its log.
func listenPort(t *testing.T, d *Daemon) int {
	t.Helper()
	for _, f := range strings.Fields(d.Log.String()) {
		if v, ok := strings.CutPrefix(f, "listen=127.0.0.1:"); ok {
			n := 0
			for _, c := range v {
				if c < '0' || c > '9' {
					break
				}
				n = n*10 + int(c-'0')
			}
			return n
		}
	}
	t.Fatalf("no listen= in the daemon's log:\n%s", d.Log)
	return 0
}

// nsWithAddr returns the namespace of tag that holds ip.
func nsWithAddr(t *testing.T, tag, ip string) string {
	t.Helper()
	for _, e := range netnsOf(tag) {
		path := "/run/netns/" + strings.TrimPrefix(e, "netns ")
		found := false
		_ = nettest.In(path, func() error {
			addrs, err := net.InterfaceAddrs()
			for _, a := range addrs {
				if strings.HasPrefix(a.String(), ip+"/") {
					found = true
				}
			}
			return err
		})
		if found {
			return path
		}
	}
	t.Fatalf("no namespace of tag %s holds %s", tag, ip)
	return ""
}

// TestFunctionNetworkBadInput (issue 14, bad input): a malformed CIDR, an
// allow list holding a forbidden range, an unknown egress value and allow
// without egress are 400s naming the key, and leave no namespace.
func TestFunctionNetworkBadInput(t *testing.T) {
	th, tag, pool := newNetHost(t)
	d := startNetDaemon(t, th, "", tag, pool)
	for key, table := range map[string]string{
		"network.allow[0]": "egress = \"allow\"\nallow = [\"10.0.0.0/33\"]",
		"network.allow[1]": "egress = \"allow\"\nallow = [\"203.0.113.0/24\", \"169.254.0.0/16\"]",
		"network.deny[0]":  "egress = \"allow\"\ndeny = [\"nonsense\"]",
		"network.egress":   "egress = \"maybe\"",
	} {
		_, err := d.Client.DeployDir(context.Background(), netFunction(t, "netbad", "[network]\n"+table+"\n"))
		ae := apiError(t, err)
		if ae.Status != 400 || !strings.Contains(ae.Message, key) {
			t.Errorf("[network] %q: %d %q, want 400 naming %s", table, ae.Status, ae.Message, key)
		}
	}
	_, err := d.Client.DeployDir(context.Background(), netFunction(t, "netbad", "[network]\nallow = [\"203.0.113.0/24\"]\n"))
	if ae := apiError(t, err); ae.Status != 400 || !strings.Contains(ae.Message, "network.egress") {
		t.Errorf("allow without egress: %d %q, want 400 naming network.egress", ae.Status, ae.Message)
	}
	if left := netnsOf(tag); len(left) != 0 {
		t.Errorf("bad deploys left %v", left)
	}
}

// TestFunctionNetworkNothingLeft (issue 14, nothing left behind): rm,
// redeploy, a failed deploy, a daemon killed with SIGKILL and restarted,
// and a clean stop leave no veth, namespace or nftables table behind.
func TestFunctionNetworkNothingLeft(t *testing.T) {
	th, tag, pool := newNetHost(t)
	state := netStateDir(t)
	d := startNetDaemon(t, th, state, tag, pool)
	egress := "[network]\negress = \"allow\"\n"
	d.Up(netFunction(t, "neta", egress))
	d.Up(netFunction(t, "netb", egress))
	if n := len(netnsOf(tag)); n != 2 {
		t.Fatalf("two functions with egress: %d namespaces, want 2", n)
	}
	if _, _, code := d.CLI("rm", "netb"); code != 0 {
		t.Fatal("zygo rm netb failed")
	}
	if n := len(netnsOf(tag)); n != 1 {
		t.Errorf("after rm: %d namespaces, want 1", n)
	}
	before := netnsOf(tag)
	redeploy := netFunction(t, "neta", egress)
	os.WriteFile(filepath.Join(redeploy, "extra.py"), []byte("X = 1\n"), 0o644)
	d.Up(redeploy)
	waitFor(t, func() bool { ns := netnsOf(tag); return len(ns) == 1 && ns[0] != before[0] }, "the old version's namespace to go after a redeploy")

	broken := netFunction(t, "netbroken", egress)
	os.WriteFile(filepath.Join(broken, "main.py"), []byte("raise RuntimeError('import fails')\n"), 0o644)
	if _, err := d.Client.DeployDir(context.Background(), broken); err == nil {
		t.Fatal("deploying a function whose import fails succeeded")
	}
	if n := len(netnsOf(tag)); n != 1 {
		t.Errorf("after a failed deploy: %v, want only neta's", netnsOf(tag))
	}

	// A daemon that dies without cleaning up: the next one sweeps.
	stale := netnsOf(tag)
	_ = d.Cmd.Process.Signal(syscall.SIGKILL)
	_ = d.Cmd.Wait()
	d2 := startNetDaemon(t, th, state, tag, pool)
	d2.Invoke("neta", map[string]any{}, nil) // restored, with a new namespace
	for _, s := range stale {
		for _, now := range netnsOf(tag) {
			if now == s {
				t.Errorf("%s of the killed daemon is still there after a restart", s)
			}
		}
	}
	d2.Stop()
	if left := leftovers(t, tag); len(left) != 0 {
		t.Errorf("after the daemon stopped: %v left behind", left)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for i := 0; i < 200; i++ { // bounded: 20 s
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// tableExists reports whether the inet nftables table name exists.
func tableExists(t *testing.T, name string) bool {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range tables {
		if x.Name == name {
			return true
		}
	}
	return false
}
