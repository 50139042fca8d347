// Package sandboxtest is the conformance suite for sandbox.Backend (and sandbox.Checkpointer
// when the backend has it), run by each backend's own tests against the real engine, in the
// manner of containerd's snapshots/testsuite.
package sandboxtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// NewBackend returns a fresh backend on a fresh state directory; the suite destroys every
// instance it makes. Reopen returns a second backend on the same state (a daemon restart);
// it may be nil when the backend cannot model that.
type NewBackend func(t *testing.T) (b sandbox.Backend, reopen func(t *testing.T) sandbox.Backend)

// Run runs the suite. Each case runs in its own subtest with its own backend.
func Run(t *testing.T, newBackend NewBackend) {
	cases := []struct {
		name string
		fn   func(t *testing.T, b sandbox.Backend, reopen func(t *testing.T) sandbox.Backend)
	}{
		{"CreateExecDestroy", testCreateExecDestroy},
		{"CreateDuplicateID", testCreateDuplicate},
		{"DestroyIsIdempotent", testDestroyIdempotent},
		{"ExecMissingBinary", testExecMissing},
		{"ExecTimeout", testExecTimeout},
		{"Files", testFiles},
		{"RunCodePersists", testRunCode},
		{"Checkpoint", testCheckpoint},
		{"RestoreCorruptedImage", testRestoreCorrupted},
		{"AttachAfterRestart", testAttach},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, reopen := newBackend(t)
			c.fn(t, b, reopen)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// RandomHex returns n random bytes as hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NewSpec returns a Spec for a fresh instance with a random id and token.
func NewSpec() sandbox.Spec {
	id := "t-" + RandomHex(6)
	tok := RandomHex(32)
	return sandbox.Spec{ID: id, Hostname: id, Token: tok, Boot: guest.Boot{Token: tok,
		Identity: guest.Identity{SandboxID: id, Generation: RandomHex(16), ResumedAt: time.Now()}}}
}

func create(t *testing.T, b sandbox.Backend, spec sandbox.Spec) *sandbox.Instance {
	t.Helper()
	ctx := ctxT(t)
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = b.Destroy(context.Background(), inst.ID) })
	return inst
}

// Sh runs a shell command in the instance and returns its stdout; it fails the test unless the
// command exits 0.
func Sh(t *testing.T, c sandbox.Guest, script string) string {
	t.Helper()
	var out, errb bytes.Buffer
	st, err := c.Exec(ctxT(t), guest.ExecRequest{Argv: []string{"/bin/sh", "-c", script}}, &out, &errb)
	if err != nil || st.Code != 0 {
		t.Fatalf("sh %q: %v %+v stderr=%s", script, err, st, errb.String())
	}
	return out.String()
}

func testCreateExecDestroy(t *testing.T, b sandbox.Backend, _ func(*testing.T) sandbox.Backend) {
	ctx := ctxT(t)
	spec := NewSpec()
	inst := create(t, b, spec)
	if got := strings.TrimSpace(Sh(t, inst.Guest, "hostname")); got != spec.Hostname {
		t.Errorf("hostname = %q, want %q", got, spec.Hostname)
	}
	var out bytes.Buffer
	st, err := inst.Guest.Exec(ctx, guest.ExecRequest{Argv: []string{"/bin/sh", "-c", "cat; exit 3"}, Stdin: strings.NewReader("in")}, &out, nil)
	if err != nil || st.Code != 3 || out.String() != "in" {
		t.Fatalf("exec with stdin = %+v %v %q, want code 3 and echo", st, err, out.String())
	}
	if gen := Sh(t, inst.Guest, "cat "+guest.GenerationPath); gen != spec.Boot.Identity.Generation {
		t.Errorf("generation = %q, want %q", gen, spec.Boot.Identity.Generation)
	}
	if ids, _ := b.List(ctx); !slices.Contains(ids, spec.ID) {
		t.Errorf("List = %v, missing %s", ids, spec.ID)
	}
	if err := b.Destroy(ctx, spec.ID); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if ids, _ := b.List(ctx); slices.Contains(ids, spec.ID) {
		t.Errorf("List after Destroy = %v, still has %s", ids, spec.ID)
	}
	if _, err := inst.Guest.Info(ctx); err == nil {
		t.Errorf("guest still answers after Destroy")
	}
}

func testCreateDuplicate(t *testing.T, b sandbox.Backend, _ func(*testing.T) sandbox.Backend) {
	spec := NewSpec()
	create(t, b, spec)
	if _, err := b.Create(ctxT(t), spec); !errdefs.IsExists(err) {
		t.Fatalf("second Create = %v, want ErrExists", err)
	}
	if _, err := b.Create(ctxT(t), sandbox.Spec{ID: "Bad/ID", Token: "x"}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("Create with bad id = %v, want ErrInvalidArgument", err)
	}
}

func testDestroyIdempotent(t *testing.T, b sandbox.Backend, _ func(*testing.T) sandbox.Backend) {
	if err := b.Destroy(ctxT(t), "t-never-made"); err != nil {
		t.Fatalf("Destroy unknown = %v, want nil", err)
	}
}

func testExecMissing(t *testing.T, b sandbox.Backend, _ func(*testing.T) sandbox.Backend) {
	inst := create(t, b, NewSpec())
	ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
	defer cancel()
	st, err := inst.Guest.Exec(ctx, guest.ExecRequest{Argv: []string{"/no/such/binary"}}, nil, nil)
	if err != nil || st.Code != 127 {
		t.Fatalf("exec of a missing binary = %+v, %v; want exit status 127, as a shell gives", st, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("exec of a missing binary hung")
	}
}

func testExecTimeout(t *testing.T, b sandbox.Backend, _ func(*testing.T) sandbox.Backend) {
	inst := create(t, b, NewSpec())
	start := time.Now()
	st, err := inst.Guest.Exec(ctxT(t), guest.ExecRequest{Argv: []string{"/bin/sleep", "30"}, Timeout: 300 * time.Millisecond}, nil, nil)
	if err != nil || !st.TimedOut || st.Signal != 15 {
		t.Fatalf("exec past its timeout = %+v %v, want timed out by SIGTERM", st, err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("timeout took %v", time.Since(start))
	}
	// A command that ignores SIGTERM is killed guest.ExecKillGrace later.
	start = time.Now()
	st, err = inst.Guest.Exec(ctxT(t), guest.ExecRequest{Argv: []string{"/bin/sh", "-c", "trap '' TERM; exec /bin/sleep 30"},
		Timeout: 300 * time.Millisecond}, nil, nil)
	if err != nil || !st.TimedOut || st.Signal != 9 {
		t.Fatalf("exec ignoring SIGTERM past its timeout = %+v %v, want timed out by SIGKILL", st, err)
	}
	if d := time.Since(start); d < guest.ExecKillGrace || d > 15*time.Second {
		t.Fatalf("SIGKILL after %v, want after the %v grace", d, guest.ExecKillGrace)
	}
}

func testFiles(t *testing.T, b sandbox.Backend, _ func(*testing.T) sandbox.Backend) {
	ctx := ctxT(t)
	inst := create(t, b, NewSpec())
	if err := inst.Guest.PutFile(ctx, "/work/a/b.txt", 0o600, strings.NewReader("hello")); err != nil {
		t.Fatalf("PutFile: %v", err)
	}
	var buf bytes.Buffer
	if err := inst.Guest.GetFile(ctx, "/work/a/b.txt", &buf); err != nil || buf.String() != "hello" {
		t.Fatalf("GetFile = %q %v", buf.String(), err)
	}
	listing, err := inst.Guest.ListFiles(ctx, "/work/a")
	ls := listing.Entries
	if err != nil || len(ls) != 1 || listing.Total != 1 || ls[0].Name != "b.txt" || ls[0].Size != 5 || ls[0].Mode&0o777 != 0o600 {
		t.Fatalf("ListFiles = %+v %v", ls, err)
	}
	if err := inst.Guest.GetFile(ctx, "/work/missing", &buf); !errdefs.IsNotFound(err) {
		t.Fatalf("GetFile missing = %v, want ErrNotFound", err)
	}
	if err := inst.Guest.PutFile(ctx, "relative", 0o644, strings.NewReader("")); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("PutFile relative = %v, want ErrInvalidArgument", err)
	}
}

func testRunCode(t *testing.T, b sandbox.Backend, _ func(*testing.T) sandbox.Backend) {
	ctx := ctxT(t)
	inst := create(t, b, NewSpec())
	if res, err := inst.Guest.RunCode(ctx, guest.CodeRequest{Code: "x = 41"}, nil, nil); err != nil || !res.OK {
		t.Fatalf("run-code x = 41: %+v %v", res, err)
	}
	var out bytes.Buffer
	res, err := inst.Guest.RunCode(ctx, guest.CodeRequest{Code: "print('x is', x)\nx + 1"}, &out, nil)
	if err != nil || !res.OK || res.Value != "42" || out.String() != "x is 41\n" {
		t.Fatalf("run-code = %+v %v %q", res, err, out.String())
	}
	res, err = inst.Guest.RunCode(ctx, guest.CodeRequest{Code: "1/0"}, nil, nil)
	if err != nil || res.OK || !strings.Contains(res.Error, "ZeroDivisionError") {
		t.Fatalf("run-code 1/0 = %+v %v", res, err)
	}
	res, err = inst.Guest.RunCode(ctx, guest.CodeRequest{Code: "import time; time.sleep(30)", Timeout: 500 * time.Millisecond}, nil, nil)
	if err != nil || res.OK || !strings.Contains(res.Error, "timed out") {
		t.Fatalf("run-code past its timeout = %+v %v", res, err)
	}
	if res, err := inst.Guest.RunCode(ctx, guest.CodeRequest{Code: "x"}, nil, nil); err != nil || res.Value != "41" {
		t.Fatalf("interpreter lost its state after a timeout: %+v %v", res, err)
	}
}

func testCheckpoint(t *testing.T, b sandbox.Backend, _ func(*testing.T) sandbox.Backend) {
	ck, ok := b.(sandbox.Checkpointer)
	if !ok {
		t.Skip("backend cannot checkpoint")
	}
	ctx := ctxT(t)
	spec := NewSpec()
	inst := create(t, b, spec)
	Sh(t, inst.Guest, "echo before > /root/f")
	img := filepath.Join(t.TempDir(), "img")
	if err := ck.Checkpoint(ctx, spec.ID, img); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if err := ck.Checkpoint(ctx, spec.ID, img); !errdefs.IsExists(err) {
		t.Fatalf("Checkpoint into an existing dir = %v, want ErrExists", err)
	}
	if err := ck.Checkpoint(ctx, "t-never-made", img+"2"); !errdefs.IsNotFound(err) {
		t.Fatalf("Checkpoint unknown = %v, want ErrNotFound", err)
	}
	Sh(t, inst.Guest, "echo after > /root/f") // the source kept running
	child := NewSpec()
	child.Token = spec.Token // the image's agent presents the parent's token
	cinst, err := ck.Restore(ctx, img, child)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	t.Cleanup(func() { _ = b.Destroy(context.Background(), child.ID) })
	if got := Sh(t, cinst.Guest, "cat /root/f; hostname"); got != "before\n"+child.Hostname+"\n" {
		t.Errorf("restored copy sees %q", got)
	}
	if got := Sh(t, inst.Guest, "cat /root/f"); got != "after\n" {
		t.Errorf("source sees %q after the restore", got)
	}
	checkReseal(t, cinst.Guest, spec.Token)
}

// checkReseal reseals a restored copy through its agent and checks what the agent did: new
// generation and identity published, machine id written, the image's token refused after.
func checkReseal(t *testing.T, c sandbox.Guest, oldToken string) {
	ctx := ctxT(t)
	req := guest.ResealRequest{NewToken: RandomHex(32), MachineID: RandomHex(16), Entropy: []byte(RandomHex(32)),
		HostTime: time.Now(), Identity: guest.Identity{SandboxID: "child", Generation: RandomHex(16), ResumedAt: time.Now()},
		Secrets: map[string][]byte{"api_key": []byte("s3cret")}}
	res, err := c.Reseal(ctx, req)
	if err != nil || res.Generation != req.Identity.Generation || len(res.EntropySample) != 32 {
		t.Fatalf("Reseal = %+v, %v", res, err)
	}
	want := req.Identity.Generation + "|" + req.MachineID + "\n|s3cret"
	if got := Sh(t, c, "cat /run/zygo/generation; echo -n '|'; cat /etc/machine-id; echo -n '|'; cat /run/secrets/api_key"); got != want {
		t.Errorf("after reseal the guest shows %q, want %q", got, want)
	}
	// Present the image's token again: the guest must refuse it. The backend's Guest must let
	// the test choose the token it presents (guest.Client does).
	ts, ok := c.(interface{ SetToken(string) })
	if !ok {
		t.Fatalf("the backend's Guest (%T) has no SetToken: the suite cannot check the old token is refused", c)
	}
	ts.SetToken(oldToken)
	if _, err := c.Info(ctx); err == nil {
		t.Errorf("the image's token still works after reseal")
	}
	ts.SetToken(req.NewToken)
}

func testRestoreCorrupted(t *testing.T, b sandbox.Backend, _ func(*testing.T) sandbox.Backend) {
	ck, ok := b.(sandbox.Checkpointer)
	if !ok {
		t.Skip("backend cannot checkpoint")
	}
	ctx := ctxT(t)
	spec := NewSpec()
	create(t, b, spec)
	img := filepath.Join(t.TempDir(), "img")
	if err := ck.Checkpoint(ctx, spec.ID, img); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	ents, _ := os.ReadDir(img)
	for _, e := range ents { // truncate every file to half and flip bytes
		p := filepath.Join(img, e.Name())
		data, _ := os.ReadFile(p)
		data = data[:len(data)/2]
		for i := range data {
			data[i] ^= 0x5a
		}
		_ = os.WriteFile(p, data, 0o600)
	}
	child := NewSpec()
	child.Token = spec.Token
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := ck.Restore(rctx, img, child); err == nil {
		_ = b.Destroy(ctx, child.ID)
		t.Fatalf("Restore of a corrupted image succeeded")
	}
	if ids, _ := b.List(ctx); slices.Contains(ids, child.ID) {
		t.Fatalf("a failed restore left %s behind: %v", child.ID, ids)
	}
}

func testAttach(t *testing.T, b sandbox.Backend, reopen func(*testing.T) sandbox.Backend) {
	if reopen == nil {
		t.Skip("backend cannot be reopened")
	}
	ctx := ctxT(t)
	spec := NewSpec()
	inst := create(t, b, spec)
	Sh(t, inst.Guest, "echo kept > /root/k")
	if c, ok := b.(interface{ Close() error }); ok {
		_ = c.Close()
	}
	b2 := reopen(t)
	inst2, err := b2.Attach(ctx, spec)
	if err != nil {
		t.Fatalf("Attach after restart: %v", err)
	}
	if got := Sh(t, inst2.Guest, "cat /root/k"); got != "kept\n" {
		t.Errorf("attached sandbox sees %q", got)
	}
	if _, err := b2.Attach(ctx, sandbox.Spec{ID: "t-never-made", Token: "x"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Attach unknown = %v, want ErrNotFound", err)
	}
	if err := b2.Destroy(ctx, spec.ID); err != nil {
		t.Fatalf("Destroy after Attach: %v", err)
	}
}
