package e2esandbox

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/zygo-run/zygo/internal/network/nettest"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// fetchPy fetches the URL in argv[1] and prints the body, or the error's class.
const fetchPy = `import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())
except Exception as e:
    print("ERR", type(e).__name__)`

// netLeft returns this daemon's host-side network objects still present: veths, namespaces and
// its nft table.
func (d *Daemon) netLeft(t *testing.T) []string {
	t.Helper()
	var left []string
	out, _ := exec.Command("ip", "-o", "link").Output()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "zy"+d.NetTag+"-") {
			left = append(left, "veth: "+l)
		}
	}
	for _, n := range dirEntries(t, "/run/netns") {
		if strings.HasPrefix(n, "zygo"+d.NetTag+"-") {
			left = append(left, "netns: "+n)
		}
	}
	c, err := nftables.New()
	if err != nil {
		t.Fatalf("nftables: %v", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatalf("listing nft tables: %v", err)
	}
	for _, tb := range tables {
		if tb.Name == "zygo"+d.NetTag {
			left = append(left, "nft table "+tb.Name)
		}
	}
	return left
}

// netOf returns sandbox id's address and MAC from `zygo sandbox ls --json`.
func (d *Daemon) netOf(id string) (addr, mac string) {
	d.t.Helper()
	var recs []wire.Sandbox
	if err := json.Unmarshal([]byte(d.OK("sandbox", "ls", "--json")), &recs); err != nil {
		d.t.Fatalf("decoding sandbox ls --json: %v", err)
	}
	for _, r := range recs {
		if r.ID == id {
			return r.Address, r.MAC
		}
	}
	d.t.Fatalf("sandbox %s not listed", id)
	return "", ""
}

// inside returns what sandbox id shows of its network: `ip -o -4 addr` and `ip -o link` of its
// interfaces other than loopback.
func (d *Daemon) inside(id string) string {
	d.t.Helper()
	return d.OK("sandbox", "exec", id, "--", "/bin/sh", "-c",
		"/usr/sbin/ip -o -4 addr show scope global; /usr/sbin/ip -o link | grep -v LOOPBACK")
}

// TestSandboxNetworkIdentity is issue 14 for sandboxes, points 2, 4 and 8: a sandbox has egress
// by default (it reaches a test host made by the test), `ls` shows its address; three fork
// children of one checkpoint each come up with an address and MAC of their own, seen inside as
// the host records them, none the source's; each reaches the test host; rm leaves no veth,
// namespace or nft table.
func TestSandboxNetworkIdentity(t *testing.T) {
	d := startDaemon(t)
	th := nettest.NewHost(t)
	url := "http://" + th.IP.String() + "/"
	src := d.OK("sandbox", "create")
	if got := d.OK("sandbox", "exec", src, "--", "/usr/bin/python3", "-c", fetchPy, url); got != th.Body {
		t.Fatalf("the sandbox fetching the test host: %q, want %q\ndaemon log:\n%s", got, th.Body, tail(d.Log(), 20))
	}
	srcAddr, srcMAC := d.netOf(src)
	if ls := d.OK("sandbox", "ls"); !strings.Contains(ls, "ADDRESS") || srcAddr == "" || !strings.Contains(ls, srcAddr) {
		t.Errorf("sandbox ls shows no address column with %q:\n%s", srcAddr, ls)
	}
	d.OK("sandbox", "checkpoint", src)
	kids := lines(d.OK("sandbox", "fork", src, "-n", "3"))
	if len(kids) != 3 {
		t.Fatalf("fork -n 3 printed %q", kids)
	}
	addrs, macs := map[string]string{}, map[string]string{}
	for _, id := range append([]string{src}, kids...) {
		addr, mac := d.netOf(id)
		if addr == "" || mac == "" {
			t.Fatalf("%s has no network identity in its record", id)
		}
		if other, dup := addrs[addr]; dup {
			t.Errorf("%s and %s share address %s", id, other, addr)
		}
		if other, dup := macs[mac]; dup {
			t.Errorf("%s and %s share MAC %s", id, other, mac)
		}
		addrs[addr], macs[mac] = id, id
		in := d.inside(id)
		if !strings.Contains(in, " "+addr+"/") || !strings.Contains(in, mac) || strings.Count(in, "link/ether") != 1 {
			t.Errorf("inside %s: %q, want its own address %s and MAC %s only", id, in, addr, mac)
		}
		if id != src {
			if strings.Contains(in, " "+srcAddr+"/") || strings.Contains(in, srcMAC) {
				t.Errorf("inside fork child %s: %q shows the source's identity %s %s", id, in, srcAddr, srcMAC)
			}
			if got := d.OK("sandbox", "exec", id, "--", "/usr/bin/python3", "-c", fetchPy, url); got != th.Body {
				t.Errorf("fork child %s fetching the test host: %q", id, got)
			}
		}
	}
	for _, id := range append(kids, src) {
		d.OK("sandbox", "rm", id)
	}
	if left := d.netLeft(t); len(left) != 1 || !strings.HasPrefix(left[0], "nft table") { // the table stays while the daemon runs
		t.Errorf("after rm: %v, want only the daemon's nft table", left)
	}
	d.Stop()
	if left := d.netLeft(t); len(left) > 0 {
		t.Errorf("after the daemon stopped with no sandbox: %v", left)
	}
}

// TestSandboxNetworkBadInput: a malformed CIDR or an allow list opening a forbidden range is
// refused naming the flag the CLI's user typed (the API names its field), and nothing of the sandbox is left behind.
func TestSandboxNetworkBadInput(t *testing.T) {
	d := startDaemon(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--allow", "10.0.0.0/33"}, "--allow: \"10.0.0.0/33\""},
		{[]string{"--allow", "10.1.0.0/16", "--allow", "169.254.0.0/16"}, "--allow: 169.254.0.0/16"},
		{[]string{"--allow", "127.0.0.1/32"}, "--allow: 127.0.0.1/32"},
		{[]string{"--deny", "nonsense"}, "--deny: \"nonsense\""},
		{[]string{"--network", "bridge"}, "--network: \"bridge\""},
		{[]string{"--network", "none", "--allow", "10.1.0.0/16"}, "--allow: "},
	} {
		msg := d.Fails(append([]string{"sandbox", "create"}, c.args...)...)
		if !strings.Contains(msg, c.want) || strings.Contains(msg, "network.") || strings.Contains(msg, d.StateDir) {
			t.Errorf("create %v: %q, want an error naming the flag, %s (and no API field, no host path)", c.args, msg, c.want)
		}
	}
	if recs := d.Sandboxes(); len(recs) != 0 {
		t.Errorf("sandboxes after refused creates: %v", recs)
	}
	if left := d.netLeft(t); len(left) > 0 && !(len(left) == 1 && strings.HasPrefix(left[0], "nft table")) {
		t.Errorf("left after refused creates: %v", left)
	}
}

// TestSandboxPortPerCopy is issue 14 point 6 (and 4's "a server inside each answers only its own
// requests"): `zygo sandbox port` prints a loopback URL reaching a server inside the sandbox;
// a fork child's server, started before the checkpoint, answers on the child's own URL with the
// child's own state, and the source's URL still reaches the source.
func TestSandboxPortPerCopy(t *testing.T) {
	d := startDaemon(t)
	src := d.OK("sandbox", "create", "--service", "web=/usr/bin/python3 -m http.server 8000 --bind 0.0.0.0 --directory /tmp/www")
	d.OK("sandbox", "exec", src, "--", "/bin/sh", "-c", "mkdir -p /tmp/www && echo "+src+" >/tmp/www/id")
	get := func(url string) string {
		t.Helper()
		body := idAt(url)
		if strings.HasPrefix(body, "ERR ") {
			t.Fatalf("GET %sid: %s", url, strings.TrimPrefix(body, "ERR "))
		}
		return body
	}
	srcURL := d.OK("sandbox", "port", src, "8000")
	if !strings.HasPrefix(srcURL, "http://127.0.0.1:") {
		t.Fatalf("sandbox port printed %q, want a loopback URL", srcURL)
	}
	if again := d.OK("sandbox", "port", src, "8000"); again != srcURL {
		t.Errorf("sandbox port again: %q, want %q", again, srcURL)
	}
	if got := get(srcURL); got != src {
		t.Fatalf("the source's server answered %q, want %q", got, src)
	}
	kid := lines(d.OK("sandbox", "fork", src, "-n", "1"))[0]
	d.OK("sandbox", "exec", kid, "--", "/bin/sh", "-c", "echo "+kid+" >/tmp/www/id")
	kidURL := d.OK("sandbox", "port", kid, "8000")
	if kidURL == srcURL {
		t.Fatalf("the child's port is the source's: %s", kidURL)
	}
	if got := get(kidURL); got != kid {
		t.Errorf("the child's server answered %q, want %q", got, kid)
	}
	if got := get(srcURL); got != src {
		t.Errorf("after the fork the source's server answered %q, want %q", got, src)
	}
	if msg := d.Fails("sandbox", "port", src, "0"); !strings.Contains(msg, "PORT") {
		t.Errorf("port 0: %q", msg)
	}
	none := d.OK("sandbox", "create", "--network", "none")
	if msg := d.Fails("sandbox", "port", none, "8000"); !strings.Contains(msg, "no network") {
		t.Errorf("port of a sandbox without network: %q", msg)
	}
	d.OK("sandbox", "rm", kid)
	if resp, err := http.Get(kidURL + "id"); err == nil {
		resp.Body.Close()
		t.Errorf("the removed child's port still answers")
	}
}
