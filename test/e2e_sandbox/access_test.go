package e2esandbox

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// freeLoopback returns a loopback address nothing listens on.
func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestSandboxAccessToken: a real daemon and real runsc sandboxes. The access token of sandbox
// a, minted by `zygo sandbox token`, execs and moves files in a (through the SDK and through
// the CLI with ZYGO_TOKEN), survives a daemon restart, and is refused (403) on sandbox b, on
// create, remove, fork, tokens, secrets and the E2B control API, and on a fork of a; once a
// is removed it is refused (401), also when a sandbox of a's name is made again.
func TestSandboxAccessToken(t *testing.T) {
	addr, e2bAddr := freeLoopback(t), freeLoopback(t)
	d := startDaemon(t, "--listen", addr, "--e2b", e2bAddr, "--no-sandbox-network")
	ctx := context.Background()
	a := d.OK("sandbox", "create", "--name", "a")
	b := d.OK("sandbox", "create", "--name", "b")
	tok := d.OK("sandbox", "token", "a")
	if !strings.HasPrefix(tok, wire.SandboxAccessTokenPrefix+a+"_") {
		t.Fatalf("zygo sandbox token a printed %q", tok)
	}
	c := zygo.NewTCPClient(addr, tok)

	// Its own sandbox: exec, files, record.
	sa := c.Sandbox("a")
	if err := sa.WriteFile(ctx, "/tmp/note", []byte("from the token"), 0o644); err != nil {
		t.Fatalf("writing a file in a with its token: %v", err)
	}
	res, err := sa.Exec(ctx, []string{"sh", "-c", "cat /tmp/note; echo -n ' '; hostname"}, nil)
	if err != nil || res.ExitCode != 0 || !strings.HasPrefix(string(res.Stdout), "from the token ") {
		t.Fatalf("exec in a with its token: %v %+v %q", err, res, res.Stdout)
	}
	if got, err := sa.ReadFile(ctx, "/tmp/note"); err != nil || string(got) != "from the token" {
		t.Fatalf("reading a file of a with its token: %v %q", err, got)
	}
	if rec, err := c.GetSandbox(ctx, a); err != nil || rec.ID != a || rec.Name != "a" {
		t.Fatalf("reading a's record with its token: %v %+v", err, rec)
	}
	// The CLI, given the token in ZYGO_TOKEN.
	if out := cliWithToken(t, addr, tok, "sandbox", "exec", "a", "--", "cat", "/tmp/note"); out != "from the token" {
		t.Fatalf("zygo sandbox exec a with ZYGO_TOKEN printed %q", out)
	}

	// Everything else: 403.
	denied := func(what string, err error) {
		t.Helper()
		if !zygo.IsPermissionDenied(err) || !strings.Contains(err.Error(), "access token of sandbox "+a) {
			t.Errorf("%s with a's token: %v, want 403 naming sandbox %s", what, err, a)
		}
	}
	_, err = c.Sandbox(b).Exec(ctx, []string{"true"}, nil)
	denied("exec in b", err)
	_, err = c.Sandbox("b").ReadFile(ctx, "/etc/hostname")
	denied("reading a file of b", err)
	_, err = c.CreateSandbox(ctx, wire.CreateSandboxBody{Name: "c"})
	denied("create", err)
	denied("removing a", c.RemoveSandbox(ctx, a))
	denied("removing b", c.RemoveSandbox(ctx, b))
	_, err = c.Fork(ctx, a, 1, "", nil)
	denied("forking a", err)
	_, err = c.Checkpoint(ctx, a, "x")
	denied("checkpointing a", err)
	_, err = c.Tokens(ctx)
	denied("listing tokens", err)
	_, err = c.CreateToken(ctx, "mine")
	denied("creating a token", err)
	_, err = c.ListSecrets(ctx)
	denied("listing secrets", err)
	denied("setting a secret", c.SetSecret(ctx, "k", []byte("v")))
	_, err = c.SandboxAccessToken(ctx, "b")
	denied("minting b's token", err)
	_, err = c.ListSandboxes(ctx)
	denied("listing sandboxes", err)
	if out, errOut, code := cliWithTokenRaw(t, addr, tok, "sandbox", "rm", "b"); code == 0 || !strings.Contains(errOut, "access token of sandbox") {
		t.Errorf("zygo sandbox rm b with a's token: exit %d, %q %q", code, out, errOut)
	}
	if len(d.Sandboxes()) != 2 {
		t.Fatalf("the daemon holds %d sandboxes, want a and b untouched", len(d.Sandboxes()))
	}
	req, _ := http.NewRequest("GET", "http://"+e2bAddr+"/sandboxes", nil)
	req.Header.Set("X-API-Key", tok)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("the E2B control API with a's token: %v %v, want 403", resp, err)
	} else {
		resp.Body.Close()
	}

	// A fork of a is another sandbox: a's token does not reach it.
	fa, err := d.Client.Fork(ctx, a, 1, "", nil)
	if err != nil || len(fa.Children) != 1 || fa.Children[0].Sandbox == nil {
		t.Fatalf("forking a: %v %+v", err, fa)
	}
	child := fa.Children[0].Sandbox.ID
	_, err = c.Sandbox(child).Exec(ctx, []string{"true"}, nil)
	denied("exec in a's fork", err)
	ct, err := d.Client.SandboxAccessToken(ctx, child)
	if err != nil || ct.Token == tok {
		t.Fatalf("the fork's token: %v %+v", err, ct)
	}
	if _, err := zygo.NewTCPClient(addr, ct.Token).Sandbox(child).Exec(ctx, []string{"true"}, nil); err != nil {
		t.Fatalf("exec in the fork with its own token: %v", err)
	}

	// The key is the daemon's, kept in its state dir: a restart keeps the token.
	d.Stop()
	d.Start()
	waitRunning(t, d.Client, a)
	if res, err := sa.Exec(ctx, []string{"cat", "/tmp/note"}, nil); err != nil || string(res.Stdout) != "from the token" {
		t.Fatalf("exec in a with its token after a daemon restart: %v %q", err, res.Stdout)
	}

	// Removed: the token dies, and a new sandbox of the same name does not revive it.
	d.OK("sandbox", "rm", "a")
	_, err = sa.Exec(ctx, []string{"true"}, nil)
	if !zygo.IsUnauthenticated(err) {
		t.Fatalf("exec with a's token after its removal: %v, want 401", err)
	}
	d.OK("sandbox", "create", "--name", "a")
	_, err = sa.Exec(ctx, []string{"true"}, nil)
	if !zygo.IsUnauthenticated(err) {
		t.Fatalf("exec with the old a's token in a new sandbox named a: %v, want 401", err)
	}
	if !strings.Contains(d.Log(), "sandbox/"+a) {
		t.Errorf("the access log does not name the calls' token sandbox/%s", a)
	}
}

// waitRunning waits until sandbox id is running again after a daemon restart.
func waitRunning(t *testing.T, c *zygo.Client, id string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		rec, err := c.GetSandbox(context.Background(), id)
		if err == nil && rec.State == "running" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s not running within a minute of the restart: %v %+v", id, err, rec)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cliWithToken runs the CLI against addr with ZYGO_TOKEN=tok, failing the test unless it
// exits 0; it returns stdout, trimmed.
func cliWithToken(t *testing.T, addr, tok string, args ...string) string {
	t.Helper()
	out, errOut, code := cliWithTokenRaw(t, addr, tok, args...)
	if code != 0 {
		t.Fatalf("ZYGO_TOKEN=… zygo --addr %s %v: exit %d: %s", addr, args, code, errOut)
	}
	return strings.TrimSpace(out)
}

func cliWithTokenRaw(t *testing.T, addr, tok string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, zygoBin, append([]string{"--addr", addr}, args...)...)
	cmd.Env = append(os.Environ(), "ZYGO_TOKEN="+tok, "ZYGO_STATE_DIR=/nonexistent")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		t.Fatalf("zygo %v did not finish within a minute", args)
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("running zygo %v: %v", args, err)
	}
	return o.String(), e.String(), code
}
