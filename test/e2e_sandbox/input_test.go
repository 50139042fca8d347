package e2esandbox

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// TestSandboxBadInput: unknown ids are 404; fork N out of range is 400 naming the bound;
// exec of a missing program exits 127 (126 not executable), as in a shell; exit codes and output pass through the
// CLI; a Python exception keeps the interpreter's state.
func TestSandboxBadInput(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()

	for _, args := range [][]string{
		{"sandbox", "exec", "sb-nosuch", "--", "true"},
		{"sandbox", "generation", "sb-nosuch"},
		{"sandbox", "checkpoint", "sb-nosuch"},
		{"sandbox", "rollback", "sb-nosuch", "--to", "cp-nosuch"},
		{"sandbox", "rm", "sb-nosuch"},
		{"sandbox", "checkpoints", "sb-nosuch"},
		{"sandbox", "checkpoints", "no-such-name"},
	} {
		if msg := d.Fails(args...); !strings.Contains(msg, "not found") {
			t.Errorf("zygo %s: %q, want not found", strings.Join(args, " "), msg)
		}
	}
	_, err := d.Client.GetSandbox(ctx, "sb-nosuch")
	wantStatus(t, err, http.StatusNotFound, "")
	_, err = d.Client.Checkpoints(ctx, "no-such-name")
	wantStatus(t, err, http.StatusNotFound, "no-such-name")

	sb := d.OK("sandbox", "create")
	for _, n := range []string{"0", "1000", "-3"} {
		if msg := d.Fails("sandbox", "fork", sb, "-n", n); !strings.Contains(msg, "between 1 and 16") {
			t.Errorf("fork -n %s: %q, want the bound named", n, msg)
		}
	}
	_, err = d.Client.Fork(ctx, sb, 1000, "", nil)
	wantStatus(t, err, http.StatusBadRequest, "between 1 and 16")
	_, err = d.Client.Fork(ctx, sb, 2, "cp-nosuch", nil)
	wantStatus(t, err, http.StatusNotFound, "")
	if cps, _ := d.Client.Checkpoints(ctx, sb); len(cps) != 0 {
		t.Errorf("refused forks left checkpoints: %+v", cps)
	}

	// A missing program exits 127 and a non-executable one 126, as in a shell, saying why
	// once on stderr.
	if _, errOut, code := d.CLI("sandbox", "exec", sb, "--", "/no/such/binary"); code != 127 || errOut != "/no/such/binary: no such file or directory\n" {
		t.Errorf("exec of a missing binary: exit %d, stderr %q; want 127", code, errOut)
	}
	if _, errOut, code := d.CLI("sandbox", "exec", sb, "--", "/etc/passwd"); code != 126 || errOut != "/etc/passwd: permission denied\n" {
		t.Errorf("exec of a non-executable file: exit %d, stderr %q; want 126", code, errOut)
	}
	var errb strings.Builder
	if st, err := d.Client.Exec(ctx, sb, wire.ExecBody{Argv: []string{"no-such-command"}}, nil, &errb); err != nil || st.Code != 127 ||
		errb.String() != "no-such-command: command not found\n" {
		t.Errorf("exec of a missing command: %+v %v stderr %q; want 127", st, err, errb.String())
	}

	// Exit codes and both streams pass through.
	out, errOut, code := d.CLI("sandbox", "exec", sb, "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 7")
	if code != 7 || out != "out\n" || errOut != "err\n" {
		t.Errorf("exec exit 7: code %d stdout %q stderr %q", code, out, errOut)
	}
	out, _, code = d.CLIIn("piped", "sandbox", "exec", "-i", sb, "cat")
	if code != 0 || out != "piped" {
		t.Errorf("exec -i cat: code %d stdout %q", code, out)
	}
	if _, errOut, code := d.CLI("sandbox", "exec", sb, "--timeout", "1s", "--", "sleep", "30"); code != 143 || !strings.Contains(errOut, "timed out") {
		t.Errorf("exec --timeout 1s of sleep 30: exit %d (want 143, SIGTERM) stderr %q", code, errOut)
	}

	// A Python exception: exit 1 with the traceback; the interpreter's state survives.
	d.OK("sandbox", "run-code", sb, "--code", "y = 5")
	_, errOut, code = d.CLIIn("1/0", "sandbox", "run-code", sb)
	if code != 1 || !strings.Contains(errOut, "ZeroDivisionError") {
		t.Errorf("run-code 1/0: code %d stderr %q", code, errOut)
	}
	if v := d.OK("sandbox", "run-code", sb, "--code", "print('p'); y * 2"); v != "p\n10" {
		t.Errorf("run-code after an exception: %q", v)
	}

	// A duplicate name is refused.
	d.OK("sandbox", "create", "--name", "dup")
	if msg := d.Fails("sandbox", "create", "--name", "dup"); !strings.Contains(msg, "already exists") {
		t.Errorf("second sandbox named dup: %q", msg)
	}
}

func wantStatus(t *testing.T, err error, status int, substr string) {
	t.Helper()
	var ae *zygo.Error
	if !errors.As(err, &ae) {
		t.Fatalf("want an API error with status %d, got %v", status, err)
	}
	if ae.Status != status || !strings.Contains(ae.Message, substr) {
		t.Errorf("status %d %q, want %d containing %q", ae.Status, ae.Message, status, substr)
	}
}

// TestSandboxUnavailable: without runsc or the guest binary the daemon still serves functions,
// and sandbox calls answer 503 saying how to install what is missing.
func TestSandboxUnavailable(t *testing.T) {
	for _, c := range []struct {
		flag, want string
	}{
		{"--runsc=/nonexistent/runsc", "scripts/install-runsc.sh"},
		{"--guest-binary=/nonexistent/zygo-guest", "make build"},
	} {
		t.Run(strings.TrimPrefix(strings.SplitN(c.flag, "=", 2)[0], "--"), func(t *testing.T) {
			d := startDaemon(t, c.flag)
			d.OK("status")
			if msg := d.Fails("sandbox", "ls"); !strings.Contains(msg, c.want) {
				t.Errorf("sandbox ls with %s: %q, want it to mention %q", c.flag, msg, c.want)
			}
			_, err := d.Client.CreateSandbox(context.Background(), wire.CreateSandboxBody{})
			wantStatus(t, err, http.StatusServiceUnavailable, c.want)
		})
	}
}

// TestSDKExample runs examples/sdk-go against a daemon: create, run-code, checkpoint, fork 3,
// each child's generation printed; it removes what it made.
func TestSDKExample(t *testing.T) {
	d := startDaemon(t)
	bin := filepath.Join(t.TempDir(), "sdk-go")
	build := exec.Command("go", "build", "-o", bin, "./examples/sdk-go")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building examples/sdk-go: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--socket", filepath.Join(d.StateDir, "zygo.sock")).CombinedOutput()
	if err != nil {
		t.Fatalf("examples/sdk-go: %v\n%s", err, out)
	}
	gens := map[string]bool{}
	for _, l := range lines(string(out)) {
		if f := strings.Fields(l); len(f) > 4 && f[0] == "child" && f[3] == "generation" {
			gens[f[4]] = true
			if !strings.Contains(l, "(42, ") || !strings.Contains(l, "written before the checkpoint") {
				t.Errorf("child line %q: want x + 1 == 42 and the file", l)
			}
		}
	}
	if len(gens) != 3 {
		t.Errorf("want 3 children with distinct generations, got %d:\n%s", len(gens), out)
	}
	if recs := d.Sandboxes(); len(recs) != 0 {
		t.Errorf("the example left sandboxes: %+v", recs)
	}
}

// TestSandboxBadInputOnRunsc: on a real daemon (its own state dir, real runsc and guest), bad
// input that the unit table (internal/api TestSandboxBadInputIs400) covers on a fake reaches
// no guest here either: 400 naming the field, no path of the daemon's in the message (a rootfs
// inside the real state dir included), nothing left. And checkpoints rm of a real runsc image
// deletes its directory and answers only once it is gone.
func TestSandboxBadInputOnRunsc(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sb := d.OK("sandbox", "create")
	noHostPath := func(what string, err error) {
		t.Helper()
		if err != nil && strings.Contains(err.Error(), d.StateDir) {
			t.Errorf("%s: the message names the daemon's state dir: %v", what, err)
		}
	}
	_, err := d.Client.CreateSandbox(ctx, wire.CreateSandboxBody{RootfsDir: filepath.Join(d.StateDir, "images")})
	wantStatus(t, err, http.StatusBadRequest, "rootfs_dir")
	noHostPath("rootfs inside the state dir", err)
	err = d.Client.GetFile(ctx, sb, "/etc/host\x00name", io.Discard)
	wantStatus(t, err, http.StatusBadRequest, "path")
	err = d.Client.PutFile(ctx, sb, "/tmp/"+strings.Repeat("n", 256), 0o644, strings.NewReader("x"))
	wantStatus(t, err, http.StatusBadRequest, "path")
	_, err = d.Client.Exec(ctx, sb, wire.ExecBody{Argv: []string{"/bin/echo", "a\x00b"}}, nil, nil)
	wantStatus(t, err, http.StatusBadRequest, "argv[1]")
	_, err = d.Client.Exec(ctx, sb, wire.ExecBody{Argv: []string{"/bin/true"}, Env: []string{"A=\x00"}}, nil, nil)
	wantStatus(t, err, http.StatusBadRequest, "env[0]")
	_, err = d.Client.Checkpoint(ctx, sb, "bad\x00tag")
	wantStatus(t, err, http.StatusBadRequest, "tag")
	err = d.Client.RemoveCheckpoint(ctx, "no such")
	wantStatus(t, err, http.StatusBadRequest, "checkpoint")
	if recs := d.Sandboxes(); len(recs) != 1 {
		t.Errorf("sandboxes after the bad calls: %+v", recs)
	}
	// The guest still answers, and a real image is removed for good.
	var out strings.Builder
	if _, err := d.Client.Exec(ctx, sb, wire.ExecBody{Argv: []string{"/bin/echo", "ok"}}, &out, nil); err != nil || out.String() != "ok\n" {
		t.Fatalf("exec after the bad calls = %q, %v", out.String(), err)
	}
	cp, err := d.Client.Checkpoint(ctx, sb, "base")
	if err != nil {
		t.Fatal(err)
	}
	// The API does not say where the image is (a host path); the daemon keeps it here.
	imageDir := filepath.Join(d.StateDir, "images", cp.ID)
	if _, err := os.Stat(imageDir); err != nil {
		t.Fatalf("image of %s: %v", cp.ID, err)
	}
	if err := d.Client.RemoveCheckpoint(ctx, "base"); err != nil {
		t.Fatalf("checkpoints rm: %v", err)
	}
	if _, err := os.Stat(imageDir); !os.IsNotExist(err) {
		t.Errorf("image dir after checkpoints rm answered: %v", err)
	}
	err = d.Client.RemoveCheckpoint(ctx, cp.ID)
	wantStatus(t, err, http.StatusNotFound, cp.ID)
}
