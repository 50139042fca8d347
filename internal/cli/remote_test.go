//go:build linux

package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/daemon"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// selfSigned writes a self-signed certificate for the IP addresses ips (ECDSA P-256, valid
// for an hour) and its key into dir, and returns their paths.
func selfSigned(t *testing.T, dir string, ips ...net.IP) (certFile, keyFile string) {
	t.Helper()
	return selfSignedFor(t, dir, nil, ips...)
}

// selfSignedFor is selfSigned for the DNS names dns and the IPs ips.
func selfSignedFor(t *testing.T, dir string, dns []string, ips ...net.IP) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "zygo test daemon"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true, IPAddresses: ips, DNSNames: dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// syncBuffer is a bytes.Buffer safe for the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// freeAddr returns host:PORT with a port that was free a moment ago.
func freeAddr(t *testing.T, host string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// writeContext writes the context file under a fresh $XDG_CONFIG_HOME (mode 0600) and
// returns its path; ZYGO_ADDR, ZYGO_TOKEN and ZYGO_CA are cleared.
func writeContext(t *testing.T, body string) string {
	t.Helper()
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	for _, k := range []string{"ZYGO_ADDR", "ZYGO_TOKEN", "ZYGO_CA"} {
		t.Setenv(k, "")
	}
	path := filepath.Join(cfg, "zygo", "config.toml")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRemoteTLS drives a real daemon serving TLS on every interface with the CLI as a laptop
// would: the address, a token and the CA from the context file; a token created on the unix
// socket works over TLS, shows in the access log by name, and once revoked gets 401; tokens
// cannot be created over TCP.
func TestRemoteTLS(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatal("this test runs a daemon, which needs bwrap on PATH: install it with `apt-get install -y bubblewrap` (or `make deps`)")
	}
	certDir := t.TempDir()
	certFile, keyFile := selfSigned(t, certDir, net.IPv4(127, 0, 0, 1))
	listen := freeAddr(t, "0.0.0.0") // beyond loopback: allowed with TLS
	_, port, _ := net.SplitHostPort(listen)
	addr := net.JoinHostPort("127.0.0.1", port)
	dir := tempStateDir(t)
	var logs syncBuffer
	stop, err := daemon.Background(context.Background(), daemon.Config{StateDir: dir, Listen: listen, TLSCert: certFile, TLSKey: keyFile,
		Sandbox: daemon.SandboxConfig{Disabled: true}, Log: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("stopping the daemon: %v", err)
		}
	}()
	writeContext(t, "") // the unix-socket calls below read no context

	// On the daemon's host, over its unix socket: create a token.
	code, stdout, stderr := runCLI(t, "--state-dir", dir, "token", "create", "--name", "ci", "-o", "json")
	if code != 0 {
		t.Fatalf("token create: exit %d: %s", code, stderr)
	}
	var created wire.TokenCreated
	if err := json.Unmarshal([]byte(stdout), &created); err != nil || created.Name != "ci" || !strings.HasPrefix(created.Secret, "zygo_") {
		t.Fatalf("token create -o json printed %q (%v)", stdout, err)
	}
	if code, _, stderr := runCLI(t, "--state-dir", dir, "token", "create", "--name", "ci"); code != 1 || !strings.Contains(stderr, "exists") {
		t.Errorf("a second token ci: exit %d, %q; want 1 and a message saying it exists", code, stderr)
	}

	// On a laptop: the context file names the daemon, the token and the CA.
	empty := tempStateDir(t) // no api.token to fall back on
	writeContext(t, "address = \"https://"+addr+"\"\ntoken = \""+created.Secret+"\"\nca = \""+certFile+"\"\n")
	if code, stdout, stderr := runCLI(t, "--state-dir", empty, "status"); code != 0 || !strings.Contains(stdout, "zygo daemon") {
		t.Fatalf("status through the context file: exit %d, %q, %q", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "--state-dir", empty, "token", "ls", "-o", "json")
	var toks []wire.Token
	if err := json.Unmarshal([]byte(stdout), &toks); code != 0 || err != nil || len(toks) != 2 || toks[0].Name != "ci" || toks[1].Name != "default" {
		t.Fatalf("token ls -o json over TLS: exit %d, %q, %q", code, stdout, stderr)
	}
	if toks[0].LastUsedAt == nil || toks[1].LastUsedAt != nil {
		t.Errorf("last used: ci %v, default %v; want ci's recorded and default never", toks[0].LastUsedAt, toks[1].LastUsedAt)
	}
	if strings.Contains(stdout, created.Secret) || strings.Contains(stdout, "secret") {
		t.Errorf("token ls shows a secret: %s", stdout)
	}
	if code, stdout, _ := runCLI(t, "--state-dir", empty, "token", "ls", "-q"); code != 0 || stdout != "ci\ndefault\n" {
		t.Errorf("token ls -q: exit %d, %q", code, stdout)
	}
	if code, _, stderr := runCLI(t, "--state-dir", empty, "token", "create", "--name", "evil"); code != 1 || !strings.Contains(stderr, "unix socket only") {
		t.Errorf("token create over TCP: exit %d, %q; want a refusal", code, stderr)
	}
	if !strings.Contains(logs.String(), `"token":"ci"`) || !strings.Contains(logs.String(), `"listener":"tcp"`) {
		t.Errorf("the access log does not name the token ci:\n%s", logs.String())
	}

	// Precedence: $ZYGO_ADDR beats the context file, --addr beats $ZYGO_ADDR.
	bogus := freeAddr(t, "127.0.0.1")
	t.Setenv("ZYGO_ADDR", "https://"+bogus)
	if code, _, stderr := runCLI(t, "--state-dir", empty, "status"); code != 1 || !strings.Contains(stderr, bogus) {
		t.Errorf("status with $ZYGO_ADDR %s: exit %d, %q; want it tried", bogus, code, stderr)
	}
	if code, _, stderr := runCLI(t, "--state-dir", empty, "--addr", "https://"+addr, "status"); code != 0 {
		t.Errorf("status with --addr over $ZYGO_ADDR: exit %d, %q", code, stderr)
	}
	t.Setenv("ZYGO_ADDR", "")

	// Without the CA the certificate does not verify, and the message says how to trust it.
	writeContext(t, "address = \"https://"+addr+"\"\ntoken = \""+created.Secret+"\"\n")
	if code, _, stderr := runCLI(t, "--state-dir", empty, "status"); code != 1 || !strings.Contains(stderr, "--ca") {
		t.Errorf("status without the CA: exit %d, %q; want a hint naming --ca", code, stderr)
	}
	if code, _, stderr := runCLI(t, "--state-dir", empty, "--ca", certFile, "status"); code != 0 {
		t.Errorf("status with --ca: exit %d, %q", code, stderr)
	}

	// Revoked on the host: the laptop's token gets 401, and the message says where it came from.
	writeContext(t, "")
	if code, _, stderr := runCLI(t, "--state-dir", dir, "token", "revoke", "ci"); code != 0 {
		t.Fatalf("token revoke: exit %d, %q", code, stderr)
	}
	ctxFile := writeContext(t, "address = \"https://"+addr+"\"\ntoken = \""+created.Secret+"\"\nca = \""+certFile+"\"\n")
	if code, _, stderr := runCLI(t, "--state-dir", empty, "status"); code != 1 || !strings.Contains(stderr, "wrong bearer token") ||
		!strings.Contains(stderr, ctxFile) {
		t.Errorf("status with a revoked token: exit %d, %q; want a 401 naming %s", code, stderr, ctxFile)
	}
	writeContext(t, "")
	if code, _, stderr := runCLI(t, "--state-dir", dir, "token", "revoke", "ci"); code != 1 || !strings.Contains(stderr, "not found") {
		t.Errorf("revoking ci twice: exit %d, %q", code, stderr)
	}
}

// TestRemoteTLSServerName: a daemon whose certificate names only a DNS name (zygo-node, as
// deploy/node-agent.yaml's), reached at an IP (a ZygoNode's POD-IP:7443), with --addr as a
// Sandbox's access Secret gives it: the certificate does not verify for the IP, the message
// names --server-name, and --server-name (or $ZYGO_SERVER_NAME) makes it work. Before
// --server-name the only way was a context file holding the address too (its server_name is
// not used for an address given by --addr), which the message pointed to.
func TestRemoteTLSServerName(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatal("this test runs a daemon, which needs bwrap on PATH: install it with `apt-get install -y bubblewrap` (or `make deps`)")
	}
	certFile, keyFile := selfSignedFor(t, t.TempDir(), []string{"zygo-node"})
	addr := freeAddr(t, "127.0.0.1")
	dir := tempStateDir(t)
	stop, err := daemon.Background(context.Background(), daemon.Config{StateDir: dir, Listen: addr, TLSCert: certFile, TLSKey: keyFile,
		Sandbox: daemon.SandboxConfig{Disabled: true}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("stopping the daemon: %v", err)
		}
	}()
	tok, err := os.ReadFile(filepath.Join(dir, "api.token"))
	if err != nil {
		t.Fatal(err)
	}
	writeContext(t, "server_name = \"elsewhere\"\n") // a context file's server_name is its own address's
	empty := tempStateDir(t)
	t.Setenv("ZYGO_TOKEN", strings.TrimSpace(string(tok)))
	code, _, stderr := runCLI(t, "--state-dir", empty, "--addr", "https://"+addr, "--ca", certFile, "status")
	if code != 1 || !strings.Contains(stderr, "--server-name") {
		t.Errorf("--addr IP with a certificate for zygo-node: exit %d, %q; want 1 and a hint naming --server-name", code, stderr)
	}
	if code, stdout, stderr := runCLI(t, "--state-dir", empty, "--addr", "https://"+addr, "--ca", certFile, "--server-name", "zygo-node", "status"); code != 0 || !strings.Contains(stdout, "zygo daemon") {
		t.Errorf("--server-name zygo-node: exit %d, %q, %q", code, stdout, stderr)
	}
	t.Setenv("ZYGO_SERVER_NAME", "zygo-node")
	if code, stdout, stderr := runCLI(t, "--state-dir", empty, "--addr", "https://"+addr, "--ca", certFile, "status"); code != 0 || !strings.Contains(stdout, "zygo daemon") {
		t.Errorf("$ZYGO_SERVER_NAME zygo-node: exit %d, %q, %q", code, stdout, stderr)
	}
	if code, _, _ := runCLI(t, "--state-dir", empty, "--addr", "https://"+addr, "--ca", certFile, "--server-name", "other", "status"); code != 1 {
		t.Errorf("--server-name other: exit %d, want 1 (the name is checked)", code)
	}
}

// The context file: an unknown key is an error naming it, and a token in a file others can
// read is refused.
func TestContextFileErrors(t *testing.T) {
	path := writeContext(t, "address = \"127.0.0.1:1\"\nadress = \"x\"\n")
	if code, _, stderr := runCLI(t, "status"); code != 1 || !strings.Contains(stderr, `unknown key "adress"`) || !strings.Contains(stderr, path) {
		t.Errorf("unknown key: exit %d, %q", code, stderr)
	}
	path = writeContext(t, "address = \"127.0.0.1:1\"\ntoken = \"x\"\n")
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, "status"); code != 1 || !strings.Contains(stderr, "chmod 600") {
		t.Errorf("a readable token: exit %d, %q", code, stderr)
	}
	writeContext(t, "address = \"ftp://127.0.0.1:1\"\n")
	if code, _, stderr := runCLI(t, "status"); code != 2 || !strings.Contains(stderr, "https://host:port") {
		t.Errorf("an address of another scheme: exit %d, %q", code, stderr)
	}
	// Commands that talk to no daemon do not read it.
	writeContext(t, "bogus = 1\n")
	if code, stdout, stderr := runCLI(t, "completion", "bash"); code != 0 || !strings.Contains(stdout, "bash completion") {
		t.Errorf("completion bash with a broken context file: exit %d, %q", code, stderr)
	}
}

// The context file's token goes only to the context file's address: an address given by
// --addr or $ZYGO_ADDR does not receive it (it would hand a remote daemon's token to whatever
// listens there).
func TestContextTokenStaysWithItsAddress(t *testing.T) {
	writeContext(t, "address = \"127.0.0.1:7001\"\ntoken = \"ctx-secret\"\n")
	for _, c := range []struct {
		addr, env, want string
	}{
		{"", "", "ctx-secret"},               // the file's address: its token
		{"127.0.0.1:7001", "", "ctx-secret"}, // the same address given again
		{"127.0.0.1:7002", "", ""},           // another address by flag
		{"", "127.0.0.1:7003", ""},           // another address by $ZYGO_ADDR
	} {
		t.Setenv("ZYGO_ADDR", c.env)
		g := &globals{addr: c.addr, stateDir: t.TempDir()}
		if err := g.resolve(); err != nil {
			t.Fatalf("resolve(--addr %q, $ZYGO_ADDR %q): %v", c.addr, c.env, err)
		}
		if g.tgt.token != c.want {
			t.Errorf("--addr %q, $ZYGO_ADDR %q: token %q, want %q", c.addr, c.env, g.tgt.token, c.want)
		}
	}
}

// Plain HTTP reaches only a daemon on this host: an address beyond loopback without TLS is
// refused before anything is sent (the token would cross the network in the clear), and the
// state dir's api.token (the local daemon's) is never sent to an address beyond loopback.
func TestPlainHTTPOnlyToLoopback(t *testing.T) {
	writeContext(t, "")
	state := t.TempDir()
	if err := os.WriteFile(filepath.Join(state, "api.token"), []byte("local-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"192.0.2.2:7070", "http://192.0.2.2:7070", "example.com:80"} {
		g := &globals{addr: addr, stateDir: state}
		if err := g.resolve(); err == nil || !isUsage(err) || !strings.Contains(err.Error(), "use https://") {
			t.Errorf("--addr %s: %v, want a usage error saying to use https://", addr, err)
		}
	}
	g := &globals{addr: "https://192.0.2.2:7070", stateDir: state}
	if err := g.resolve(); err != nil || g.tgt.token != "" {
		t.Errorf("--addr https://192.0.2.2:7070: %v, token %q; want no error and not the local api.token", err, g.tgt.token)
	}
	g = &globals{addr: "127.0.0.1:7070", stateDir: state}
	if err := g.resolve(); err != nil || g.tgt.token != "local-secret" {
		t.Errorf("--addr 127.0.0.1:7070: %v, token %q; want the local api.token", err, g.tgt.token)
	}
}
