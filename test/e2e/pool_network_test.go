package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// poolChannelScript opens, in mode "listen", a TCP and a UDP socket on loopback and an
// abstract unix socket, holds them for event["hold"] seconds and reports each outcome; in
// mode "reach" it tries to reach each of them. Every outcome is "ok" or the error's text.
const poolChannelScript = `import os, socket, time
ADDR = b"\0zygo-e2e-pool-a"
def attempt(out, name, f):
    try:
        f()
        out[name] = "ok"
    except OSError as e:
        out[name] = "%s: %s" % (type(e).__name__, e)
def handler(event, context):
    out, keep = {}, []
    if event["mode"] == "listen":
        def tcp():
            s = socket.socket(); keep.append(s); s.bind(("127.0.0.1", 31337)); s.listen(1)
        def udp():
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); keep.append(s); s.bind(("127.0.0.1", 31338))
        def abstract():
            s = socket.socket(socket.AF_UNIX); keep.append(s); s.bind(ADDR); s.listen(1)
        for name, f in (("tcp", tcp), ("udp", udp), ("abstract", abstract)):
            attempt(out, name, f)
        time.sleep(event["hold"])
        return out
    attempt(out, "tcp", lambda: socket.create_connection(("127.0.0.1", 31337), timeout=2))
    attempt(out, "udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", 31338)))
    attempt(out, "tcp6", lambda: socket.socket(socket.AF_INET6))
    attempt(out, "abstract", lambda: socket.socket(socket.AF_UNIX).connect(ADDR))
    return out
`

// TestPoolNetworkIsolation is the hostile tester's scenario: in a shared pool, tenant A's
// request tries to listen on TCP and UDP loopback and on an abstract unix socket and keeps
// running while tenant B's request, in the same zygote's network namespace, tries to reach
// each. A's TCP and UDP binds are refused (no IP socket at all), its abstract socket is
// bound but B's connection to it is refused (Landlock scope), and so is every IP socket of
// B's. In a zygote-per-tenant pool, where A's zygote has its own namespace, A's listeners
// work: the shared pool's refusals are its own.
func TestPoolNetworkIsolation(t *testing.T) {
	d := startDaemon(t, "")
	d.poolUp("shared", "prefork = 2")
	d.poolUp("own", "isolation = \"zygote-per-tenant\"")
	var a map[string]string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.mustRunScript("shared", "tenant-a", poolChannelScript, map[string]any{"mode": "listen", "hold": 4}, &a)
	}()
	time.Sleep(1500 * time.Millisecond)
	var b map[string]string
	d.mustRunScript("shared", "tenant-b", poolChannelScript, map[string]any{"mode": "reach"}, &b)
	wg.Wait()
	for _, k := range []string{"tcp", "udp"} {
		if a[k] == "ok" {
			t.Errorf("tenant A could bind %s on the shared pool's loopback: %v", k, a)
		}
	}
	if a["abstract"] != "ok" {
		t.Errorf("tenant A could not bind its abstract unix socket (B's refusal proves nothing): %v", a)
	}
	for _, k := range []string{"tcp", "udp", "tcp6", "abstract"} {
		if b[k] == "" || b[k] == "ok" {
			t.Errorf("tenant B reached %s in the shared pool: %v", k, b)
		}
	}

	var own map[string]string
	d.mustRunScript("own", "tenant-a", poolChannelScript, map[string]any{"mode": "listen", "hold": 0}, &own)
	if fmt.Sprint(own) != "map[abstract:ok tcp:ok udp:ok]" {
		t.Errorf("tenant A's own zygote refused a listener of its own: %v", own)
	}
}
