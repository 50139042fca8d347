package gvisor_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/sandboxtest"
)

// testNet is a test host made by the test: a network namespace ("peer") holding the far end of
// every sandbox namespace's veth, so that no traffic leaves the test's own namespaces. Sandbox
// namespace i has 10.77.i.2/24 with a default route via the peer's 10.77.i.1 and a MAC
// 02:77:00:00:00:i.
type testNet struct {
	prefix string // of every namespace and link this test makes
	peer   string // the peer namespace's name
}

// ipCmd runs ip(8), failing t with its output.
func ipCmd(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s (install iproute2: apt-get install iproute2)", strings.Join(args, " "), err, out)
	}
}

func newTestNet(t testing.TB) *testNet {
	n := &testNet{prefix: "zgt" + sandboxtest.RandomHex(3)}
	n.peer = n.prefix + "-peer"
	ipCmd(t, "netns", "add", n.peer)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.peer).Run() })
	ipCmd(t, "-n", n.peer, "link", "set", "lo", "up")
	return n
}

// endpoint makes sandbox namespace i and returns its attachment.
func (n *testNet) endpoint(t testing.TB, i int) *sandbox.NetAttachment {
	ns := fmt.Sprintf("%s-s%d", n.prefix, i)
	ipCmd(t, "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	in, out := fmt.Sprintf("%ss%d", n.prefix, i), fmt.Sprintf("%sp%d", n.prefix, i)
	ipCmd(t, "-n", ns, "link", "add", in, "address", fmt.Sprintf("02:77:00:00:00:%02x", i), "type", "veth",
		"peer", "name", out, "netns", n.peer)
	ipCmd(t, "-n", ns, "addr", "add", fmt.Sprintf("10.77.%d.2/24", i), "dev", in)
	ipCmd(t, "-n", ns, "link", "set", in, "up")
	ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	ipCmd(t, "-n", ns, "route", "add", "default", "via", fmt.Sprintf("10.77.%d.1", i))
	ipCmd(t, "-n", n.peer, "addr", "add", fmt.Sprintf("10.77.%d.1/24", i), "dev", out)
	ipCmd(t, "-n", n.peer, "link", "set", out, "up")
	return &sandbox.NetAttachment{NetnsPath: filepath.Join("/run/netns", ns), ResolvConf: []byte("nameserver 10.77.0.53\n")}
}

// serve runs a TCP echo server on port in the peer namespace that prefixes every line with the
// address the connection came from; it stops with the test.
func (n *testNet) serve(t testing.TB, port int) {
	const src = `
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(64)
def h(c, a):
    f = c.makefile("rwb", buffering=0)
    for line in f:
        f.write(a[0].encode() + b" " + line)
while True:
    c, a = s.accept(); threading.Thread(target=h, args=(c, a), daemon=True).start()
`
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", n.peer, "/usr/bin/python3", "-c", src, fmt.Sprint(port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	time.Sleep(300 * time.Millisecond) // the listener is up before the first sandbox dials
}

// netProbe is the program a sandbox runs: it holds one connection to the peer's echo server
// and, for each line it reads from its input, sends it over that connection and prints the
// answer or the error and how long it took. "reconnect" dials a new connection first; "read"
// only reads (30 s timeout).
const netProbe = `
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
print("ready", c.getsockname()[0], flush=True)
for line in sys.stdin:
    if line.strip() == "reconnect":
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
    t0 = time.monotonic()
    try:
        if line.strip() == "read":
            print("read", c.recv(100) or "EOF", round(time.monotonic()-t0, 2), flush=True)
            continue
        c.sendall(line.encode()); ans = c.makefile("rb").readline().decode().strip()
        print("ok", ans if ans else "EOF", round(time.monotonic()-t0, 2), flush=True)
    except OSError as e:
        print("err", type(e).__name__, e.errno, round(time.monotonic()-t0, 2), flush=True)
`

// TestNetworkIdentityAndCapturedConnection is issue 14, points 4 and 5 on runsc itself: a
// sandbox runs runsc's own network stack on the veth of a namespace the host made; a copy
// restored from its checkpoint into another namespace comes up with that namespace's MAC and
// address (not the image's), the peer sees its connections come from the new address, the
// connection that was open at the checkpoint fails at once in the copy, a new one works at once,
// and the source keeps its connection.
func TestNetworkIdentityAndCapturedConnection(t *testing.T) {
	tn := newTestNet(t)
	tn.serve(t, 9000)
	h := newHarness(t, nil)
	b := h.be
	ctx := tctx(t)
	spec := sandboxtest.NewSpec()
	spec.Net = tn.endpoint(t, 1)
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = b.Destroy(context.Background(), spec.ID) })
	ifaces := "/usr/sbin/ip -o -4 addr show scope global; /usr/sbin/ip -o link"
	out := sandboxtest.Sh(t, inst.Guest, ifaces+"; cat /etc/resolv.conf")
	if !strings.Contains(out, "02:77:00:00:00:01") || !strings.Contains(out, "10.77.1.2/24") ||
		!strings.Contains(out, "nameserver 10.77.0.53") {
		t.Fatalf("inside the sandbox: %q, want the namespace's MAC, address and resolv.conf", out)
	}
	// The probe holds a connection open across the checkpoint.
	sandboxtest.Sh(t, inst.Guest, "mkdir /tmp/p && mkfifo /tmp/p/in && cat >/tmp/p/probe.py <<'EOF'\n"+netProbe+
		"\nEOF\nsetsid -f /usr/bin/python3 /tmp/p/probe.py 10.77.1.1 9000 <>/tmp/p/in >/tmp/p/out 2>/tmp/p/err")
	say := func(g sandbox.Guest, line string, n int) string {
		t.Helper()
		if line != "" {
			sandboxtest.Sh(t, g, "echo "+line+" >/tmp/p/in")
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			o := sandboxtest.Sh(t, g, "cat /tmp/p/out /tmp/p/err")
			if strings.Count(o, "\n") >= n || time.Now().After(deadline) {
				return o
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if o := say(inst.Guest, "hello", 2); !strings.Contains(o, "ok 10.77.1.2 hello") {
		t.Fatalf("source before the checkpoint: %q", o)
	}
	img := filepath.Join(h.dir, "img")
	if err := b.Checkpoint(ctx, spec.ID, img); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	child := sandboxtest.NewSpec()
	child.Token, child.Net = spec.Token, tn.endpoint(t, 2)
	cinst, err := b.Restore(ctx, img, child)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	t.Cleanup(func() { _ = b.Destroy(context.Background(), child.ID) })
	cout := sandboxtest.Sh(t, cinst.Guest, ifaces)
	if !strings.Contains(cout, "02:77:00:00:00:02") || !strings.Contains(cout, "10.77.2.2/24") ||
		strings.Contains(cout, "10.77.1.2") || strings.Contains(cout, ":00:01") {
		t.Fatalf("inside the copy: %q, want the new namespace's MAC and address only", cout)
	}
	// The copy's captured connection fails at once, reading and writing (never a 30 s
	// timeout: the probe prints the time each took), and a new one works at once.
	say(cinst.Guest, "read", 3)
	say(cinst.Guest, "again", 4)
	o := say(cinst.Guest, "reconnect", 5)
	lines := strings.Split(strings.TrimSpace(o), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[2], "read EOF 0.0") || !strings.HasPrefix(lines[3], "err BrokenPipeError 32 0.0") ||
		!strings.HasPrefix(lines[4], "ok 10.77.2.2 reconnect") {
		t.Errorf("the copy's probe: %q, want the old connection at EOF and refusing writes at once, a new one from 10.77.2.2", o)
	}
	if o := say(inst.Guest, "still", 3); !strings.Contains(o, "ok 10.77.1.2 still") {
		t.Errorf("the source's probe: %q, want its connection kept", o)
	}
}
