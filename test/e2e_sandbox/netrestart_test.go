package e2esandbox

import (
	"io"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/zygo-run/zygo/internal/network/nettest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// webService serves /tmp/www on port 8000 inside a sandbox.
const webService = "web=/usr/bin/python3 -m http.server 8000 --bind 0.0.0.0 --directory /tmp/www"

// idAt GETs url+"id" until the sandbox's service answers (bounded), and returns the body, or
// the last error's text prefixed with "ERR".
func idAt(url string) string {
	last := ""
	for range 50 { // the service may still be starting
		resp, err := http.Get(url + "id")
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return strings.TrimSpace(string(b))
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "ERR " + last
}

// hostVethOf returns the name of this daemon's host-side veth carrying the gateway of addr
// (the .1 of its /30).
func (d *Daemon) hostVethOf(addr string) string {
	d.t.Helper()
	gw := netip.MustParseAddr(addr).Prev()
	links, err := netlink.LinkList()
	if err != nil {
		d.t.Fatal(err)
	}
	for _, l := range links {
		if !strings.HasPrefix(l.Attrs().Name, "zy"+d.NetTag+"-") {
			continue
		}
		as, _ := netlink.AddrList(l, netlink.FAMILY_V4)
		for _, a := range as {
			if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && ip == gw {
				return l.Attrs().Name
			}
		}
	}
	d.t.Fatalf("no veth of tag %q carries %s", d.NetTag, gw)
	return ""
}

// waitAdopted waits (bounded) until the daemon has recovered sandbox id, and returns its record.
func (d *Daemon) waitAdopted(id string) sandbox.SandboxRecord {
	d.t.Helper()
	var rec sandbox.SandboxRecord
	for range 300 {
		if rec = d.Record(id); rec.State != sandbox.Recovering {
			return rec
		}
		time.Sleep(200 * time.Millisecond)
	}
	d.t.Fatalf("sandbox %s still %s after the restart", id, rec.State)
	return rec
}

// TestSandboxNetworkAfterRestart is the tester's scenario (attack/sandbox_net_after_restart.sh):
// sandboxes with network, then a daemon restart. The one whose endpoint survived is adopted with
// it: its port answers its own server, it reaches a test host; the one whose host veth was
// removed while the daemon was down fails closed: dead, naming its network, its port refused;
// sandboxes created after the restart get addresses no recorded sandbox holds and their own
// ports; rm leaves nothing but the daemon's table, and the stopped daemon nothing at all.
func TestSandboxNetworkAfterRestart(t *testing.T) {
	d := startDaemon(t)
	th := nettest.NewHost(t)
	url := "http://" + th.IP.String() + "/"
	mk := func(name string) (id, addr string) {
		id = d.OK("sandbox", "create", "--name", name, "--service", webService)
		d.OK("sandbox", "exec", id, "--", "/bin/sh", "-c", "mkdir -p /tmp/www && echo "+name+" >/tmp/www/id")
		addr, _ = d.netOf(id)
		return id, addr
	}
	old, oldAddr := mk("old")
	lost, lostAddr := mk("lost")
	if got := idAt(d.OK("sandbox", "port", old, "8000")); got != "old" {
		t.Fatalf("before the restart the old sandbox's port answered %q", got)
	}
	lostVeth := d.hostVethOf(lostAddr)

	d.Stop()
	if out, err := exec.Command("ip", "link", "del", lostVeth).CombinedOutput(); err != nil { // "lost"'s endpoint does not survive
		t.Fatalf("ip link del %s: %v: %s", lostVeth, err, out)
	}
	d.Start()
	if rec := d.waitAdopted(old); rec.State != sandbox.Running {
		t.Fatalf("the old sandbox after the restart: %s %q, want running\ndaemon log:\n%s", rec.State, rec.Error, tail(d.Log(), 30))
	}
	if rec := d.waitAdopted(lost); rec.State != sandbox.Dead || !strings.Contains(rec.Error, "network") {
		t.Errorf("the sandbox whose veth was removed: %s %q, want dead naming its network", rec.State, rec.Error)
	}
	if a, _ := d.netOf(old); a != oldAddr {
		t.Errorf("the old sandbox's address after the restart: %s, want %s", a, oldAddr)
	}

	held := map[string]string{oldAddr: old}
	var news []string
	for _, name := range []string{"new1", "new2", "new3"} { // past the held addresses at the pool's start
		id, addr := mk(name)
		if other, dup := held[addr]; dup {
			t.Errorf("new sandbox %s got address %s, held by %s", id, addr, other)
		}
		held[addr] = id
		news = append(news, id)
	}
	if got := idAt(d.OK("sandbox", "port", old, "8000")); got != "old" {
		t.Errorf("after the restart the old sandbox's port answered %q, want its own server", got)
	}
	for i, id := range news {
		if got, want := idAt(d.OK("sandbox", "port", id, "8000")), []string{"new1", "new2", "new3"}[i]; got != want {
			t.Errorf("new sandbox %s's port answered %q, want %q", id, got, want)
		}
	}
	if msg := d.Fails("sandbox", "port", lost, "8000"); !strings.Contains(msg, "no live network") {
		t.Errorf("port of the sandbox that lost its network: %q, want a refusal", msg)
	}
	if got := d.OK("sandbox", "exec", old, "--", "/usr/bin/python3", "-c", fetchPy, url); got != th.Body {
		t.Errorf("the adopted sandbox fetching the test host: %q, want %q", got, th.Body)
	}

	for _, id := range append(news, old, lost) {
		d.OK("sandbox", "rm", id)
	}
	if left := d.netLeft(t); len(left) != 1 || !strings.HasPrefix(left[0], "nft table") {
		t.Errorf("after rm: %v, want only the daemon's nft table", left)
	}
	d.Stop()
	if left := d.netLeft(t); len(left) > 0 {
		t.Errorf("after the daemon stopped with no sandbox: %v", left)
	}
}
