//go:build linux

package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/daemon"
)

// tempStateDir returns a short fresh directory (unix socket paths must fit
// in 108 bytes), removed when the test ends.
func tempStateDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "zygo-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// runCLI runs the CLI on args and returns its exit status and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestAddrToken runs the CLI against a real daemon serving --listen: the
// token comes from $ZYGO_TOKEN, else from api.token under --state-dir, and a
// 401 says what to do.
func TestAddrToken(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatal("this test runs a daemon, which needs bwrap on PATH: install it with `apt-get install -y bubblewrap` (or `make deps`)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := tempStateDir(t)
	stop, err := daemon.Background(context.Background(), daemon.Config{StateDir: dir, Listen: addr,
		Sandbox: daemon.SandboxConfig{Disabled: true}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("stopping the daemon: %v", err)
		}
	}()
	tok, err := os.ReadFile(daemon.TokenPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	empty := tempStateDir(t)
	other := tempStateDir(t)
	if err := os.WriteFile(filepath.Join(other, "api.token"), []byte(strings.Repeat("ab", 32)), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name, env string
		args      []string
		code      int
		stderr    []string // each must appear
	}{
		{"token from the state dir", "", []string{"--state-dir", dir, "status"}, 0, nil},
		{"token from ZYGO_TOKEN", string(tok) + "\n", []string{"--state-dir", empty, "status"}, 0, nil},
		{"ZYGO_TOKEN wins", string(tok), []string{"--state-dir", other, "status"}, 0, nil},
		{"no token", "", []string{"--state-dir", empty, "status"}, 1,
			[]string{"bearer token", "found no token", filepath.Join(empty, "api.token"), "set ZYGO_TOKEN", "same --state-dir"}},
		{"no token, invoke", "", []string{"--state-dir", empty, "invoke", "ex", "--data", "{}"}, 1,
			[]string{"found no token", "set ZYGO_TOKEN"}},
		{"wrong ZYGO_TOKEN", strings.Repeat("0", 64), []string{"--state-dir", dir, "status"}, 1,
			[]string{"wrong bearer token", "refused the token in $ZYGO_TOKEN"}},
		{"another state dir's token", "", []string{"--state-dir", other, "status"}, 1,
			[]string{"refused the token in " + filepath.Join(other, "api.token"), "--state-dir"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("ZYGO_TOKEN", c.env)
			code, stdout, stderr := runCLI(t, append([]string{"--addr", addr}, c.args...)...)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stdout %q, stderr %q", code, c.code, stdout, stderr)
			}
			if c.code == 0 && !strings.Contains(stdout, "zygo daemon") {
				t.Errorf("stdout %q, want the daemon's status", stdout)
			}
			for _, want := range c.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr %q does not say %q", stderr, want)
				}
			}
		})
	}
}
