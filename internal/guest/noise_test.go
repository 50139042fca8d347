package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// relay listens at a unix socket and forwards every connection to target frame by frame (the
// channel's 2-byte length prefix), recording what passes and letting mutate change frames.
// It is the man in the middle a hijacked /zygo/host would allow.
type relay struct {
	mu     sync.Mutex
	seen   bytes.Buffer
	mutate func(fromGuest bool, index int, frame []byte) // may change frame in place
}

func startRelay(t *testing.T, target string, r *relay) string {
	t.Helper()
	path := filepath.Join(filepath.Dir(target), "relay.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			g, err := ln.Accept()
			if err != nil {
				return
			}
			h, err := net.Dial("unix", target)
			if err != nil {
				g.Close()
				continue
			}
			go r.pump(g, h, true)
			go r.pump(h, g, false)
		}
	}()
	return path
}

func (r *relay) pump(from, to net.Conn, fromGuest bool) {
	defer from.Close()
	defer to.Close()
	for i := 0; ; i++ {
		frame, err := readFrame(from, 1<<16)
		if err != nil {
			return
		}
		r.mu.Lock()
		r.seen.Write(frame)
		mutate := r.mutate
		r.mu.Unlock()
		if mutate != nil {
			mutate(fromGuest, i, frame)
		}
		if writeFrame(to, frame) != nil {
			return
		}
	}
}

func (r *relay) recorded() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.seen.Bytes())
}

// startHost runs only the host's end: a Client listening at a socket in a temp dir.
func startHost(t *testing.T, token string) (*Client, string) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "zgn-") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := NewClient(token, nil)
	t.Cleanup(func() { cancel(); c.Close(); ln.Close() })
	go c.Serve(ctx, ln)
	return c, sock
}

// startAgentVia starts an Agent holding token that dials path.
func startAgentVia(t *testing.T, path, token string) {
	t.Helper()
	dir := t.TempDir()
	boot, _ := json.Marshal(Boot{Token: token, Identity: Identity{SandboxID: "sb-relayed", Generation: strings.Repeat("cd", 16)}})
	if err := os.WriteFile(filepath.Join(dir, "boot.json"), boot, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a := New(Config{SocketPath: path, BootPath: filepath.Join(dir, "boot.json"), RunDir: filepath.Join(dir, "run"), Root: filepath.Join(dir, "root")})
	if err := a.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	go a.Run(ctx)
}

// waitEpoch waits until c has accepted more than epoch connections.
func waitEpoch(t *testing.T, c *Client, epoch uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.Epoch() <= epoch {
		if time.Now().After(deadline) {
			t.Fatal("the relayed agent never connected")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A relay between guest and host sees neither the token nor anything the two say: not the
// Hello (sandbox id), not a command, not its output.
func TestRelayReadsNothing(t *testing.T) {
	token := strings.Repeat("k", 64)
	c, sock := startHost(t, token)
	ctx := waitCtx(t)
	r := &relay{}
	startAgentVia(t, startRelay(t, sock, r), token)
	info, err := c.Info(ctx)
	if err != nil || info.SandboxID != "sb-relayed" {
		t.Fatalf("info through the relay = %+v, %v", info, err)
	}
	var out bytes.Buffer
	if _, err := c.Exec(ctx, ExecRequest{Argv: []string{"/bin/echo", "marker-7f3a9c"}}, &out, nil); err != nil || out.String() != "marker-7f3a9c\n" {
		t.Fatalf("exec through the relay = %q, %v", out.String(), err)
	}
	seen := r.recorded()
	if len(seen) < 100 {
		t.Fatalf("the relay saw only %d bytes: the test did not go through it", len(seen))
	}
	for _, secret := range []string{token, "sb-relayed", "marker-7f3a9c", "/bin/echo", "Bearer"} {
		if bytes.Contains(seen, []byte(secret)) {
			t.Errorf("the relay saw %q in clear", secret)
		}
	}
}

// A relay that changes one bit of what the guest sends makes the call fail; it never turns
// into a different answer.
func TestRelayCannotForge(t *testing.T) {
	token := strings.Repeat("k", 64)
	c, sock := startHost(t, token)
	ctx := waitCtx(t)
	var flips atomic.Int32
	r := &relay{mutate: func(fromGuest bool, i int, frame []byte) {
		if fromGuest && i > 0 && len(frame) > 0 { // after the handshake
			frame[len(frame)/2] ^= 0x01
			flips.Add(1)
		}
	}}
	startAgentVia(t, startRelay(t, sock, r), token)
	waitEpoch(t, c, 0)
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var out bytes.Buffer
	_, err := c.Exec(cctx, ExecRequest{Argv: []string{"/bin/echo", "hello"}}, &out, nil)
	if err == nil {
		t.Fatalf("exec through a tampering relay succeeded with %q", out.String())
	}
	if out.Len() > 0 && out.String() != "hello\n" {
		t.Errorf("tampered output reached the caller: %q", out.String())
	}
	if flips.Load() == 0 {
		t.Fatal("the relay changed nothing: the test did not go through it")
	}
	t.Logf("exec through the tampering relay: %v", err)
}

// A host without the token learns nothing from the agent and never gets a working connection:
// the agent cannot decrypt its answer and keeps dialling.
func TestImpostorHostGetsNoChannel(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "impostor.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, _, err = acceptChannel(conn, "guess", func([]byte) ([]byte, error) { return []byte(`{"ok":true}`), nil })
		got <- err
	}()
	startAgentVia(t, sock, strings.Repeat("k", 64))
	select {
	case err := <-got:
		if err == nil {
			t.Fatal("a host with the wrong token completed the handshake")
		}
		if errors.Is(err, io.EOF) {
			t.Fatalf("agent closed before its first message: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent never dialled")
	}
}

// Large transfers cross frame boundaries intact (frames carry at most framePlaintextMax bytes).
func TestSecureConnLargeWrites(t *testing.T) {
	a, b := net.Pipe()
	token := "t0k"
	type res struct {
		sc  *secureConn
		err error
	}
	hostDone := make(chan res, 1)
	go func() {
		sc, _, err := acceptChannel(b, token, func([]byte) ([]byte, error) { return []byte("ok"), nil })
		hostDone <- res{sc, err}
	}()
	g, reply, err := initiateChannel(a, token, []byte("hi"))
	if err != nil || string(reply) != "ok" {
		t.Fatalf("initiate: %q %v", reply, err)
	}
	h := <-hostDone
	if h.err != nil {
		t.Fatal(h.err)
	}
	msg := bytes.Repeat([]byte("0123456789abcdef"), 300_000) // 4.8 MB, ~74 frames
	go func() { g.Write(msg); g.Close() }()
	back, err := io.ReadAll(h.sc)
	if !bytes.Equal(back, msg) {
		t.Fatalf("read %d bytes (err %v), want %d equal bytes", len(back), err, len(msg))
	}
}

// A guest from an image made before protocol 2 (a plaintext JSON hello) is recognised: calls
// waiting for it fail at once with ErrOldGuest instead of timing out.
func TestOldGuestFailsFast(t *testing.T) {
	c, sock := startHost(t, strings.Repeat("k", 64))
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte(`{"proto":1,"token":"` + strings.Repeat("k", 64) + `","sandbox_id":"sb-old"}` + "\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	err = c.Wait(ctx)
	if !errors.Is(err, ErrOldGuest) {
		t.Fatalf("Wait = %v, want ErrOldGuest", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("Wait took %v; it should fail as soon as the old hello arrives", d)
	}
}

// Bytes that merely look like an old guest's hello, from anything that reaches the socket
// without the token, change nothing the Client believes: waiting calls do not fail with
// ErrOldGuest, and the real guest still connects afterwards.
func TestUnauthenticatedOldHelloChangesNothing(t *testing.T) {
	token := strings.Repeat("k", 64)
	c, sock := startHost(t, token)
	for _, junk := range []string{`{"`, `{"proto":1,"token":"wrong","sandbox_id":"sb-x"}` + "\n"} {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte(junk))
		if junk == `{"` {
			conn.(*net.UnixConn).CloseWrite()
		}
		io.ReadAll(conn) // until the host closes it: the handshake has failed
		conn.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := c.Wait(ctx)
	cancel()
	if errors.Is(err, ErrOldGuest) {
		t.Fatalf("after unauthenticated bytes, Wait = %v: the client was marked incompatible", err)
	}
	startAgentVia(t, sock, token)
	if err := c.Wait(waitCtx(t)); err != nil {
		t.Fatalf("the real guest after the junk: %v", err)
	}
}
