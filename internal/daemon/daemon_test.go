package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/daemon"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// These tests run the daemon in-process: they need bwrap (the daemon refuses
// to start without it) but start no sandbox.

func requireBwrap(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatal("daemon tests need bwrap on PATH: install it with `apt-get install -y bubblewrap` (or `make deps`)")
	}
}

// stateDir returns a fresh state directory the sandbox uid can traverse
// (t.TempDir's parents are 0700), removed when the test ends.
func stateDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "zygo-daemon-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// syncBuffer is a log destination safe for the daemon's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// config is a daemon configuration for dir with its log kept in memory,
// shown if the test fails. Sandboxes and per-request cgroups are off: these
// tests are about the daemon's own lifecycle, and must not leave cgroups
// behind.
func config(t *testing.T, dir string) daemon.Config {
	cfg, _ := configWithLog(t, dir)
	return cfg
}

// configWithLog is config, also returning the daemon's log.
func configWithLog(t *testing.T, dir string) (daemon.Config, *syncBuffer) {
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs)
		}
	})
	return daemon.Config{StateDir: dir, Sandbox: daemon.SandboxConfig{Disabled: true},
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, logs
}

// running is a daemon started by start.
type running struct {
	dir    string
	cancel context.CancelFunc
	errc   chan error
}

// start runs daemon.Run in a goroutine and waits until it is listening.
func start(t *testing.T, cfg daemon.Config) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{dir: cfg.StateDir, cancel: cancel, errc: make(chan error, 1)}
	ready := make(chan struct{})
	go func() { r.errc <- daemon.Run(ctx, cfg, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-r.errc:
		cancel()
		t.Fatalf("Run returned before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the daemon was not ready within 30s")
	}
	return r
}

// stop cancels the daemon and returns Run's error.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.errc:
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within 15s of its context being cancelled")
		return nil
	}
}

// checkGoroutines records the number of goroutines now and returns a check
// that waits up to 5 s for the count to come back to it, printing every
// goroutine's stack if it does not (Tailscale's tstest.ResourceCheck).
func checkGoroutines(t *testing.T) func() {
	t.Helper()
	before := runtime.NumGoroutine()
	return func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		var now int
		for {
			if now = runtime.NumGoroutine(); now <= before {
				return
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("goroutines leaked: %d before the daemon, %d 5s after it stopped:\n%s", before, now, buf)
	}
}

// freeLoopbackAddr returns a 127.0.0.1 address with a port nobody listens on.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestRunLifecycle(t *testing.T) {
	requireBwrap(t)
	ctx := context.Background()
	leaks := checkGoroutines(t)
	dir := stateDir(t)
	sock := daemon.SocketPath(dir)
	// A stale socket file from a daemon that died: the new one replaces it.
	if err := os.WriteFile(sock, []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config(t, dir)
	cfg.Listen = freeLoopbackAddr(t)
	d := start(t, cfg)

	c := zygo.NewClient(sock)
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatalf("status over the socket: %v", err)
	}
	if st.Version != daemon.Version || st.Functions != 0 || st.UptimeMs < 0 {
		t.Errorf("status = %+v", st)
	}
	if fns, err := c.Functions(ctx); err != nil || len(fns) != 0 {
		t.Errorf("List on a new state dir = %+v, %v", fns, err)
	}
	tok, err := os.ReadFile(daemon.TokenPath(dir))
	if err != nil {
		t.Fatalf("reading the token the daemon made: %v", err)
	}
	if _, err := zygo.NewTCPClient(cfg.Listen, string(tok)).Status(ctx); err != nil {
		t.Errorf("status over --listen %s: %v", cfg.Listen, err)
	}
	for p, want := range map[string]fs.FileMode{dir: fs.ModeDir | 0o711, sock: fs.ModeSocket | 0o600} {
		if fi, err := os.Stat(p); err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", filepath.Base(p), fi.Mode(), err, want)
		}
	}

	// A second daemon on the same state dir is refused, and leaves the
	// first one serving.
	err = daemon.Run(ctx, config(t, dir), nil)
	if err == nil || !strings.Contains(err.Error(), "another zygo daemon") {
		t.Errorf("second Run = %v, want an error about another zygo daemon", err)
	}
	if _, err := c.Status(ctx); err != nil {
		t.Errorf("the first daemon stopped answering after the second was refused: %v", err)
	}

	if err := d.stop(t); err != nil {
		t.Errorf("Run after cancel = %v, want nil", err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket still there after shutdown: %v", err)
	}
	_, err = c.Status(ctx)
	var un *zygo.Unreachable
	if !errors.As(err, &un) {
		t.Errorf("status after shutdown = %v, want *zygo.Unreachable", err)
	}

	// The lock went with it: the state dir can be served again.
	d2 := start(t, config(t, dir))
	if _, err := zygo.NewClient(sock).Status(ctx); err != nil {
		t.Errorf("status from the restarted daemon: %v", err)
	}
	if err := d2.stop(t); err != nil {
		t.Errorf("second Run after cancel = %v", err)
	}
	leaks()
}

// A TCP address beyond loopback is refused without TLS, with an error naming the address and
// the TLS flags (remote_test.go serves one with TLS).
func TestListenOnlyLoopback(t *testing.T) {
	requireBwrap(t)
	for _, addr := range []string{"0.0.0.0:7777", ":7777", "[::]:7777", "192.0.2.1:7777", "example.com:80", "localhost.example.com:7777"} {
		t.Run(addr, func(t *testing.T) {
			dir := stateDir(t)
			cfg := config(t, dir)
			cfg.Listen = addr
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := daemon.Run(ctx, cfg, func() { t.Error("the daemon started") })
			if err == nil || !strings.Contains(err.Error(), "only with TLS") || !strings.Contains(err.Error(), addr) ||
				!strings.Contains(err.Error(), "--tls-cert and --tls-key") {
				t.Errorf("Run with --listen %s = %v, want a refusal naming it", addr, err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("the refused daemon wrote to its state dir: %d entries", len(entries))
			}
		})
	}
	// TLS needs both files, and --listen; files that do not hold a key pair are named.
	for _, c := range []struct {
		cert, key, listen, want string
	}{
		{"cert.pem", "", "0.0.0.0:7777", "--tls-cert and --tls-key go together"},
		{"", "key.pem", "0.0.0.0:7777", "--tls-cert and --tls-key go together"},
		{"cert.pem", "key.pem", "", "needs --listen"},
		{"/nonexistent/cert.pem", "/nonexistent/key.pem", "0.0.0.0:7777", "/nonexistent/cert.pem"},
	} {
		cfg := config(t, stateDir(t))
		cfg.Listen, cfg.TLSCert, cfg.TLSKey = c.listen, c.cert, c.key
		if err := daemon.Run(context.Background(), cfg, func() { t.Error("the daemon started") }); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run with --tls-cert %q --tls-key %q --listen %q = %v, want %q", c.cert, c.key, c.listen, err, c.want)
		}
	}
	for _, addr := range []string{"127.0.0.1", "[::1]:x"} {
		cfg := config(t, stateDir(t))
		cfg.Listen = addr
		if err := daemon.Run(context.Background(), cfg, nil); err == nil {
			t.Errorf("Run with --listen %q succeeded", addr)
		}
	}
	// The metrics-only listener serves without a token: loopback only, TLS or not.
	for _, addr := range []string{"0.0.0.0:7777", ":7777", "[::]:7777", "192.0.2.1:7777", "example.com:80", "localhost.example.com:7777"} {
		t.Run("--metrics-listen="+addr, func(t *testing.T) {
			dir := stateDir(t)
			cfg := config(t, dir)
			cfg.MetricsListen = addr
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := daemon.Run(ctx, cfg, func() { t.Error("the daemon started") })
			if err == nil || !strings.Contains(err.Error(), "only loopback") || !strings.Contains(err.Error(), "--metrics-listen ") ||
				!strings.Contains(err.Error(), addr) {
				t.Errorf("Run with --metrics-listen %s = %v, want a refusal naming both", addr, err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("the refused daemon wrote to its state dir: %d entries", len(entries))
			}
		})
	}
	for _, addr := range []string{"127.0.0.1", "[::1]:x"} {
		cfg := config(t, stateDir(t))
		cfg.MetricsListen = addr
		if err := daemon.Run(context.Background(), cfg, nil); err == nil {
			t.Errorf("Run with --metrics-listen %q succeeded", addr)
		}
	}
}

func TestRunNeedsBwrap(t *testing.T) {
	cfg := config(t, stateDir(t))
	cfg.Bwrap = "" // looked up on PATH
	t.Setenv("PATH", t.TempDir())
	err := daemon.Run(context.Background(), cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "apt-get install -y bubblewrap") {
		t.Errorf("Run without bwrap = %v, want an error saying how to install it", err)
	}
}

// children returns the pids of this process's live children.
func children(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	me := fmt.Sprint(os.Getpid())
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // not a pid, or gone
		}
		// pid (comm) state ppid ...; comm may hold spaces, so split after the last ')'.
		rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
		if f := strings.Fields(rest); len(f) > 2 && f[1] == me && f[0] != "Z" {
			out = append(out, e.Name())
		}
	}
	return out
}

// A function served by the daemon: its zygote is a child of ours, and
// shutting the daemon down stops it and every goroutine that watched it.
func TestRunServesAFunction(t *testing.T) {
	requireBwrap(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Fatal("this test deploys a Python function on /usr/bin/python3: install it with `apt-get install -y python3`")
	}
	ctx := context.Background()
	leaks := checkGoroutines(t)
	before := children(t)
	d := start(t, config(t, stateDir(t)))
	c := zygo.NewClient(daemon.SocketPath(d.dir))

	fn := t.TempDir()
	files := map[string]string{
		"zygo.toml": "name = \"echo\"\nruntime = \"python\"\nhandler = \"main:handler\"\n",
		"main.py":   "def handler(event, context):\n    return {\"got\": event}\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(fn, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.DeployDir(ctx, fn)
	if err != nil {
		d.stop(t)
		t.Fatalf("Deploy: %v", err)
	}
	if res.Name != "echo" || !strings.HasPrefix(res.Version, "sha256:") {
		t.Errorf("Deploy = %+v", res)
	}
	inv, err := c.Invoke(ctx, "echo", []byte(`{"n":1}`))
	if err != nil {
		t.Errorf("Invoke: %v", err)
	} else {
		var v struct{ Got struct{ N int } }
		if err := json.Unmarshal(inv.Value, &v); err != nil || v.Got.N != 1 {
			t.Errorf("Invoke = %s (%v), want the event echoed", inv.Value, err)
		}
	}
	t.Logf("deployed %s in %d ms; children before %v, now %v", res.Version, res.ReadyMs, before, children(t))
	if len(children(t)) <= len(before) {
		t.Errorf("no zygote among our children while a function is deployed")
	}

	if err := d.stop(t); err != nil {
		t.Errorf("Run after cancel = %v", err)
	}
	if left := children(t); len(left) > len(before) {
		t.Errorf("children left after shutdown: %v (before: %v)", left, before)
	}
	leaks()
}
