package guest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// countingTransport is a Transport over a UnixTransport that counts DropBoot calls, so a
// test sees when the Client lets go of the boot data.
type countingTransport struct {
	UnixTransport
	drops atomic.Int32
}

func (t *countingTransport) Listen() (net.Listener, error) { return t.UnixTransport.Listen() }
func (t *countingTransport) PutBoot(b Boot) error          { return t.UnixTransport.PutBoot(b) }
func (t *countingTransport) DropBoot() error {
	t.drops.Add(1)
	return t.UnixTransport.DropBoot()
}

// TestConnectOverTransport: the boot data a Transport hands over reaches the agent, the
// agent's connection arrives through the Transport's listener, and the Client drops the boot
// data once, at the first authenticated connection; stop ends accepting.
func TestConnectOverTransport(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "zgt-") // short: a unix socket path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var shared []string
	tr := &countingTransport{UnixTransport: UnixTransport{Dir: dir,
		ShareSocket: func(p string) error { shared = append(shared, filepath.Base(p)); return nil },
		ShareBoot:   func(p string) error { shared = append(shared, filepath.Base(p)); return nil }}}
	token := strings.Repeat("t", 64)
	if err := tr.PutBoot(Boot{Token: token, Identity: Identity{SandboxID: "sb-tr", Generation: strings.Repeat("cd", 16)}}); err != nil {
		t.Fatal(err)
	}
	c, stop, err := Connect(tr, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(); c.Close() })
	if got := strings.Join(shared, ","); got != "boot.json,agent.sock" {
		t.Errorf("shared %q, want boot.json then agent.sock", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a := New(Config{SocketPath: tr.Socket(), BootPath: tr.Boot(), RunDir: filepath.Join(dir, "run"), Root: filepath.Join(dir, "root")})
	if err := a.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	go a.Run(ctx)
	info, err := c.Info(waitCtx(t))
	if err != nil || info.SandboxID != "sb-tr" {
		t.Fatalf("Info = %+v, %v, want the boot's sandbox id", info, err)
	}
	if n := tr.drops.Load(); n != 1 {
		t.Errorf("DropBoot called %d times after the first connection, want 1", n)
	}
	stop()
	stop() // idempotent
	if _, err := net.Dial("unix", tr.Socket()); err == nil {
		t.Errorf("the transport still accepts after stop")
	}
}

// TestUnixTransportSocketTooLong: a socket path a unix socket cannot hold is refused as an
// invalid argument, with nothing made.
func TestUnixTransportSocketTooLong(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	tr := &UnixTransport{Dir: dir}
	if _, err := tr.Listen(); err == nil || !strings.Contains(err.Error(), "too long for a unix socket") {
		t.Errorf("Listen = %v, want too long", err)
	}
}
