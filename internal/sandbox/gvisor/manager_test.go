package gvisor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/gvisor"
	"github.com/zygo-run/zygo/internal/sandbox/sandboxtest"
)

type harness struct {
	dir string
	reg *sandbox.MemRegistry
	be  *gvisor.Backend
	m   *sandbox.Manager
	ids sandbox.HostIDs // nil: the engine's default uid
}

func newHarness(t testing.TB, reseal sandbox.ResealFunc) *harness {
	h := &harness{dir: stateDir(t), reg: sandbox.NewMemRegistry()}
	h.open(t, reseal)
	t.Cleanup(func() { h.removeAll(t) })
	return h
}

func (h *harness) open(t testing.TB, reseal sandbox.ResealFunc) {
	h.be = newBackend(t, filepath.Join(h.dir, "engine"))
	m, err := sandbox.NewManager(sandbox.ManagerConfig{Backend: h.be, Registry: h.reg,
		ImageDir: filepath.Join(h.dir, "images"), Reseal: reseal, ReadyTimeout: 30 * time.Second, HostIDs: h.ids})
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
}

// removeAll removes every sandbox, so a failing test leaves no container behind.
func (h *harness) removeAll(t testing.TB) {
	ctx := context.Background()
	recs, _ := h.m.List(ctx)
	for _, r := range recs {
		_ = h.m.Remove(ctx, r.ID)
	}
	ids, _ := h.be.List(ctx)
	for _, id := range ids {
		_ = h.be.Destroy(ctx, id)
	}
}

func tctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func (h *harness) file(t testing.TB, id, path string) string {
	t.Helper()
	var b bytes.Buffer
	if err := h.m.GetFile(tctx(t), id, path, &b); err != nil {
		t.Fatalf("reading %s in %s: %v", path, id, err)
	}
	return b.String()
}

func (h *harness) code(t testing.TB, id, src string) string {
	t.Helper()
	res, err := h.m.RunCode(tctx(t), id, guest.CodeRequest{Code: src}, nil, nil)
	if err != nil || !res.OK {
		t.Fatalf("run-code %q in %s: %+v %v", src, id, res, err)
	}
	return res.Value
}

func (h *harness) sh(t testing.TB, id, script string) string {
	t.Helper()
	var out bytes.Buffer
	st, err := h.m.Exec(tctx(t), id, guest.ExecRequest{Argv: []string{"/bin/sh", "-c", script}}, &out, nil)
	if err != nil || st.Code != 0 {
		t.Fatalf("sh %q in %s: %+v %v", script, id, st, err)
	}
	return out.String()
}

// TestManagerForkRollback is issue 4's walk: create, write, run-code, checkpoint, fork 3,
// independence of the children, rollback, rm. With issue 5's checks: the 3 children and 2
// rollbacks of one checkpoint have 5 distinct generations, hostnames, machine-ids and guest
// tokens, and in every copy the token that was in the image is refused once it is resealed.
func TestManagerForkRollback(t *testing.T) {
	var mu sync.Mutex // guards imageTokenRefused
	imageTokenRefused := map[string]bool{}
	reseal := func(ctx context.Context, tg sandbox.ResealTarget) (guest.ResealResult, error) {
		res, err := sandbox.DefaultReseal(ctx, tg)
		if err == nil {
			tg.Guest.(*guest.Client).SetToken(tg.Checkpoint.Token)
			_, ierr := tg.Guest.Info(ctx)
			tg.Guest.(*guest.Client).SetToken(tg.Sandbox.Token)
			mu.Lock()
			imageTokenRefused[tg.Sandbox.Generation] = ierr != nil && strings.Contains(ierr.Error(), "bad token")
			mu.Unlock()
		}
		return res, err
	}
	h := newHarness(t, reseal)
	ctx := tctx(t)
	src, err := h.m.Create(ctx, sandbox.CreateOptions{Name: "src"})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := h.m.PutFile(ctx, "src", "/root/data.txt", 0o644, strings.NewReader("v1")); err != nil {
		t.Fatalf("PutFile: %v", err)
	}
	h.code(t, src.ID, "x = 41")
	cp, err := h.m.Checkpoint(ctx, src.ID, "base")
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if cp.SizeBytes == 0 || cp.SandboxID != src.ID {
		t.Errorf("checkpoint record %+v", cp)
	}
	res, err := h.m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 3, From: "base"})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	var kids []sandbox.SandboxRecord
	for i, c := range res.Children {
		if c.Err != nil {
			t.Fatalf("child %d: %v", i, c.Err)
		}
		kids = append(kids, c.Sandbox)
	}
	checkChildren(t, h, src, cp, kids)

	// A change in one child is seen by nobody else.
	h.m.PutFile(ctx, kids[0].ID, "/root/data.txt", 0o644, strings.NewReader("child0"))
	h.code(t, kids[0].ID, "x = 99")
	for _, id := range []string{src.ID, kids[1].ID, kids[2].ID} {
		if got := h.file(t, id, "/root/data.txt"); got != "v1" {
			t.Errorf("%s sees %q after child 0 wrote", id, got)
		}
		if got := h.code(t, id, "x"); got != "41" {
			t.Errorf("%s sees x = %s after child 0 changed it", id, got)
		}
	}

	checkRollbacks(t, h, src, cp, kids, func(gen string) bool {
		mu.Lock()
		defer mu.Unlock()
		return imageTokenRefused[gen]
	})

	// A referenced checkpoint cannot be removed.
	if err := h.m.RemoveCheckpoint(ctx, cp.ID); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("RemoveCheckpoint while referenced = %v, want ErrFailedPrecondition", err)
	}
	checkRemoveAll(t, h, cp.ID)
}

// checkRollbacks rolls src back to cp twice: each brings the checkpoint's file back, keeps the
// id and is a new copy; the 3 children and 2 rollbacks have distinct generations, hostnames,
// machine-ids and tokens, and refused(generation) says the image's token was refused there.
func checkRollbacks(t *testing.T, h *harness, src sandbox.SandboxRecord, cp sandbox.CheckpointRecord, kids []sandbox.SandboxRecord, refused func(string) bool) {
	// Rollback brings the checkpoint's file back, keeps the id, and is a new generation.
	ctx := tctx(t)
	h.m.PutFile(ctx, src.ID, "/root/data.txt", 0o644, strings.NewReader("v2"))
	facts := map[string]map[string]string{"generation": {}, "hostname": {}, "machine-id": {}, "token": {}}
	note := func(who string, rec sandbox.SandboxRecord) {
		facts["generation"][who] = rec.Generation
		facts["token"][who] = rec.Token
		facts["hostname"][who] = h.sh(t, rec.ID, "hostname")
		facts["machine-id"][who] = h.file(t, rec.ID, "/etc/machine-id")
		if !refused(rec.Generation) {
			t.Errorf("%s: the image's token still works after reseal", who)
		}
	}
	for i, k := range kids {
		note(fmt.Sprintf("child %d", i), k)
	}
	for i := range 2 {
		rb, err := h.m.Rollback(ctx, src.ID, cp.ID)
		if err != nil {
			t.Fatalf("Rollback %d: %v", i, err)
		}
		if rb.ID != src.ID {
			t.Errorf("rollback %d: id %s, want %s", i, rb.ID, src.ID)
		}
		note(fmt.Sprintf("rollback %d", i), rb)
		if got := h.file(t, src.ID, "/root/data.txt"); got != "v1" {
			t.Errorf("after rollback the file is %q, want v1", got)
		}
		if got := strings.TrimSpace(h.sh(t, src.ID, "cat /run/zygo/generation")); got != rb.Generation {
			t.Errorf("guest publishes generation %q, record has %q", got, rb.Generation)
		}
	}
	// The image holds the source's token (a checkpoint does not reseal the source).
	facts["generation"]["source"], facts["token"]["source"] = src.Generation, src.Token
	for kind, vals := range facts {
		distinct(t, kind+" of the 3 children and 2 rollbacks", vals)
		if n := len(vals); n < 5 {
			t.Errorf("%s: %d values, want every copy's", kind, n)
		}
	}

}

func checkChildren(t *testing.T, h *harness, src sandbox.SandboxRecord, cp sandbox.CheckpointRecord, kids []sandbox.SandboxRecord) {
	seen := map[string]map[string]bool{"generation": {}, "hostname": {}, "machine-id": {}, "random": {}}
	add := func(kind, v string) {
		if seen[kind][v] {
			t.Errorf("%s %q repeats across children", kind, v)
		}
		seen[kind][v] = true
	}
	for _, k := range kids {
		if got := h.file(t, k.ID, "/root/data.txt"); got != "v1" {
			t.Errorf("child %s sees %q, want v1", k.ID, got)
		}
		if got := h.code(t, k.ID, "x"); got != "41" {
			t.Errorf("child %s has x = %s, want 41", k.ID, got)
		}
		var id guest.Identity
		if err := json.Unmarshal([]byte(h.file(t, k.ID, guest.IdentityPath)), &id); err != nil {
			t.Fatalf("identity.json: %v", err)
		}
		if id.SandboxID != k.ID || id.ParentID != src.ID || id.CheckpointID != cp.ID || id.Generation != k.Generation {
			t.Errorf("child identity %+v, record %+v", id, k)
		}
		add("generation", k.Generation)
		add("hostname", h.sh(t, k.ID, "hostname"))
		add("machine-id", h.file(t, k.ID, "/etc/machine-id"))
		add("random", h.code(t, k.ID, "import random; random.random()"))
	}
	if seen["generation"][src.Generation] {
		t.Errorf("a child kept the parent's generation")
	}
}

// checkRemoveAll removes every sandbox and the checkpoint, then checks that nothing is left:
// no runsc container, no instance dir, no image.
func checkRemoveAll(t *testing.T, h *harness, cpID string) {
	ctx := tctx(t)
	recs, _ := h.m.List(ctx)
	for _, r := range recs {
		if err := h.m.Remove(ctx, r.ID); err != nil {
			t.Fatalf("Remove %s: %v", r.ID, err)
		}
	}
	if err := h.m.Remove(ctx, "sb-nonexistent"); !errdefs.IsNotFound(err) {
		t.Errorf("Remove unknown = %v, want ErrNotFound", err)
	}
	if err := h.m.RemoveCheckpoint(ctx, cpID); err != nil {
		t.Fatalf("RemoveCheckpoint after rm: %v", err)
	}
	if ids, err := h.be.List(ctx); err != nil || len(ids) != 0 {
		t.Errorf("backend still lists %v (%v)", ids, err)
	}
	for _, d := range []string{filepath.Join(h.dir, "engine", "instances"), filepath.Join(h.dir, "images")} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("%s still has %d entries", d, len(ents))
		}
	}
	inst := filepath.Join(h.dir, "engine", "instances")
	if mounts, _ := os.ReadFile("/proc/self/mounts"); bytes.Contains(mounts, []byte(inst)) {
		t.Errorf("a mount under %s is left", inst)
	}
}

func TestManagerBadInput(t *testing.T) {
	h := newHarness(t, nil)
	ctx := tctx(t)
	src, err := h.m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	for _, n := range []int{0, -1, sandbox.MaxForkN + 1} {
		if _, err := h.m.Fork(ctx, src.ID, sandbox.ForkOptions{N: n}); !errdefs.IsInvalidArgument(err) {
			t.Errorf("Fork n=%d = %v, want ErrInvalidArgument", n, err)
		}
	}
	if _, err := h.m.Exec(ctx, "sb-unknown", guest.ExecRequest{Argv: []string{"true"}}, nil, nil); !errdefs.IsNotFound(err) {
		t.Errorf("Exec in unknown sandbox = %v, want ErrNotFound", err)
	}
	if st, err := h.m.Exec(ctx, src.ID, guest.ExecRequest{Argv: []string{"no-such-binary"}}, nil, nil); err != nil || st.Code != 127 {
		t.Errorf("Exec of a missing binary = %+v, %v; want exit status 127", st, err)
	}
	if _, err := h.m.Rollback(ctx, src.ID, "cp-unknown"); !errdefs.IsNotFound(err) {
		t.Errorf("Rollback to unknown checkpoint = %v, want ErrNotFound", err)
	}
	if _, err := h.m.Create(ctx, sandbox.CreateOptions{Name: src.Name}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Create with a name that looks like an id = %v, want ErrInvalidArgument", err)
	}
	if _, err := h.m.Create(ctx, sandbox.CreateOptions{Name: "taken"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.Create(ctx, sandbox.CreateOptions{Name: "taken"}); !errdefs.IsExists(err) {
		t.Errorf("Create with a taken name = %v, want ErrExists", err)
	}
}

// TestManagerResealFailsClosed: a copy whose reseal fails is destroyed and never listed.
func TestManagerResealFailsClosed(t *testing.T) {
	fail := func(ctx context.Context, t sandbox.ResealTarget) (guest.ResealResult, error) {
		return guest.ResealResult{}, errors.New("injected: guest did not acknowledge")
	}
	h := newHarness(t, fail)
	ctx := tctx(t)
	src, err := h.m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	res, err := h.m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 2})
	if err == nil || len(res.Children) != 2 || res.Children[0].Err == nil || res.Children[1].Err == nil {
		t.Fatalf("Fork with failing reseal = %+v, %v; want two failed children", res, err)
	}
	if recs, _ := h.m.List(ctx); len(recs) != 1 {
		t.Errorf("sandboxes after failed fork: %d, want only the source", len(recs))
	}
	if _, err := h.m.Rollback(ctx, src.ID, res.Checkpoint.ID); err == nil {
		t.Errorf("Rollback with failing reseal succeeded")
	}
	h.sh(t, src.ID, "true") // the source is untouched by the failed rollback
	if ids, _ := h.be.List(ctx); len(ids) != 1 {
		t.Errorf("engine instances after failed fork and rollback: %v, want only the source", ids)
	}
}

// TestManagerRecover restarts the daemon's side in the middle: a new backend and manager on
// the same state adopt the running sandbox and mark a dead one Dead.
func TestManagerRecover(t *testing.T) {
	h := newHarness(t, nil)
	ctx := tctx(t)
	alive, err := h.m.Create(ctx, sandbox.CreateOptions{Name: "alive"})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := h.m.Create(ctx, sandbox.CreateOptions{Name: "dead"})
	if err != nil {
		t.Fatal(err)
	}
	h.code(t, alive.ID, "y = 'kept'")
	_ = h.m.Close()
	if err := killContainer(h.be, dead.EngineID); err != nil {
		t.Fatal(err)
	}
	h.open(t, nil)
	rep, err := h.m.Recover(ctx)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if len(rep.Adopted) != 1 || rep.Adopted[0] != alive.ID || len(rep.Dead) != 1 || rep.Dead[0] != dead.ID {
		t.Fatalf("Recover = %+v", rep)
	}
	if got := h.code(t, alive.ID, "y"); got != "'kept'" {
		t.Errorf("adopted sandbox has y = %s", got)
	}
	rec, _ := h.m.Get(ctx, dead.ID)
	if rec.State != sandbox.Dead || rec.Error == "" {
		t.Errorf("dead sandbox is %s (%q), want dead with a cause", rec.State, rec.Error)
	}
	if _, err := h.m.Exec(ctx, dead.ID, guest.ExecRequest{Argv: []string{"true"}}, nil, nil); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Exec in a failed sandbox = %v, want ErrFailedPrecondition", err)
	}
	if err := h.m.Remove(ctx, dead.ID); err != nil {
		t.Errorf("Remove failed sandbox: %v", err)
	}
}

func killContainer(b *gvisor.Backend, id string) error { return gvisor.KillContainerForTest(b, id) }

// TestManagerServicesOnFork: a restart service is a fresh process in a child, a signal
// service is signalled after the new generation is published.
func TestManagerServicesOnFork(t *testing.T) {
	h := newHarness(t, nil)
	ctx := tctx(t)
	src, err := h.m.Create(ctx, sandbox.CreateOptions{Services: []guest.Service{
		{Name: "fresh", OnFork: guest.OnForkRestart, Argv: []string{"/bin/sh", "-c",
			`echo "start $(cat /run/zygo/generation)" >> /tmp/fresh.log; exec sleep 1000000`}},
		{Name: "told", OnFork: guest.OnForkSignal, Signal: 10, Argv: []string{"/bin/sh", "-c",
			`trap 'echo "sig $(cat /run/zygo/generation)" >> /tmp/told.log' USR1; while :; do sleep 0.1; done`}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // let the services start before the checkpoint
	res, err := h.m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	kid := res.Children[0].Sandbox
	// The services write their lines on their own time: poll.
	poll := func(script, want string) string {
		var got string
		for range 50 {
			if got = h.sh(t, kid.ID, script); got == want {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		return got
	}
	want := "start " + src.Generation + "\nstart " + kid.Generation + "\n"
	if got := poll("cat /tmp/fresh.log", want); got != want {
		t.Errorf("restart service log %q, want %q", got, want)
	}
	if got := poll("cat /tmp/told.log 2>/dev/null || true", "sig "+kid.Generation+"\n"); got != "sig "+kid.Generation+"\n" {
		t.Errorf("signal service log %q, want the child's generation", got)
	}
	if got := h.sh(t, src.ID, "cat /tmp/told.log 2>/dev/null || true"); got != "" {
		t.Errorf("the parent's signal service was signalled: %q", got)
	}
}

// TestManagerCheckpointDiskFull: a checkpoint into a full disk (a 1 MiB tmpfs) fails, leaves
// no image and no record, and the source keeps running.
func TestManagerCheckpointDiskFull(t *testing.T) {
	h := &harness{dir: stateDir(t), reg: sandbox.NewMemRegistry()}
	images := filepath.Join(h.dir, "images")
	os.MkdirAll(images, 0o700)
	if err := unix.Mount("tmpfs", images, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mounting a small tmpfs (needs root): %v", err)
	}
	t.Cleanup(func() { unix.Unmount(images, unix.MNT_DETACH) })
	h.open(t, nil)
	t.Cleanup(func() { h.removeAll(t) })
	ctx := tctx(t)
	src, err := h.m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.code(t, src.ID, "x = 41")
	if _, err := h.m.Checkpoint(ctx, src.ID, ""); err == nil {
		t.Fatal("checkpoint into a full disk succeeded")
	}
	if ents, _ := os.ReadDir(images); len(ents) != 0 {
		t.Errorf("half image left: %v", ents)
	}
	if cps, _ := h.m.Checkpoints(ctx, ""); len(cps) != 0 {
		t.Errorf("checkpoint records after a failure: %v", cps)
	}
	if got := h.code(t, src.ID, "x"); got != "41" {
		t.Errorf("source after a failed checkpoint has x = %s", got)
	}
	if rec, _ := h.m.Get(ctx, src.ID); rec.State != sandbox.Running {
		t.Errorf("source is %s", rec.State)
	}
}

// TestManagerCheckpointStoreFailure: a real image is written, then the store fails (the
// checkpoint record, or the source's return to running): the image dir is removed, no record
// is left, and the source keeps running with its state.
func TestManagerCheckpointStoreFailure(t *testing.T) {
	reg := sandboxtest.NewFaultyRegistry()
	h := &harness{dir: stateDir(t), reg: reg.MemRegistry}
	h.be = newBackend(t, filepath.Join(h.dir, "engine"))
	m, err := sandbox.NewManager(sandbox.ManagerConfig{Backend: h.be, Registry: reg,
		ImageDir: filepath.Join(h.dir, "images"), ReadyTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	t.Cleanup(func() { h.removeAll(t) })
	ctx := tctx(t)
	src, err := h.m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.code(t, src.ID, "x = 41")
	images := filepath.Join(h.dir, "images")
	for name, inject := range map[string]func(){
		"checkpoint record": reg.FailNextPutCheckpoint,
		"source state":      func() { reg.FailNextPutSandbox(sandbox.Running) },
	} {
		inject()
		if _, err := h.m.Checkpoint(ctx, src.ID, ""); err == nil || !strings.Contains(err.Error(), "injected") {
			t.Errorf("%s not saved: checkpoint = %v, want the injected error", name, err)
		}
		if ents, _ := os.ReadDir(images); len(ents) != 0 {
			t.Errorf("%s not saved: image left: %v", name, ents)
		}
		if cps, _ := h.m.Checkpoints(ctx, ""); len(cps) != 0 {
			t.Errorf("%s not saved: checkpoint records left: %v", name, cps)
		}
		if rec, _ := h.m.Get(ctx, src.ID); rec.State != sandbox.Running {
			t.Errorf("%s not saved: source is %s", name, rec.State)
		}
		if got := h.code(t, src.ID, "x"); got != "41" {
			t.Errorf("%s not saved: source has x = %s", name, got)
		}
	}
}

// TestManagerCorruptImage flips bytes in the middle of a real image's pages.img (its size
// unchanged): fork and rollback refuse it with an error naming the checkpoint and the file,
// and leave no child record, no container and no instance dir; the source runs on as it was.
// With the bytes put back, the same fork succeeds.
func TestManagerCorruptImage(t *testing.T) {
	h := newHarness(t, nil)
	ctx := tctx(t)
	src, err := h.m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.code(t, src.ID, "x = 41")
	cp, err := h.m.Checkpoint(ctx, src.ID, "base")
	if err != nil {
		t.Fatal(err)
	}
	pages := filepath.Join(cp.Dir, "pages.img")
	good, err := os.ReadFile(pages)
	if err != nil || len(good) < 4096 {
		t.Fatalf("reading pages.img: %d bytes, %v", len(good), err)
	}
	if _, ok := cp.Checksums["pages.img"]; !ok {
		t.Fatalf("no checksum recorded for pages.img: %v", cp.Checksums)
	}
	bad := append([]byte(nil), good...)
	for i := len(bad) / 2; i < len(bad)/2+64; i++ {
		bad[i] ^= 0x5a
	}
	if err := os.WriteFile(pages, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	_, ferr := h.m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 2, From: "base"})
	_, rerr := h.m.Rollback(ctx, src.ID, cp.ID)
	for op, err := range map[string]error{"fork": ferr, "rollback": rerr} {
		var ce *sandbox.CorruptImageError
		if !errors.As(err, &ce) || ce.Checkpoint != cp.ID || ce.File != "pages.img" ||
			!strings.Contains(err.Error(), cp.ID) || !strings.Contains(err.Error(), "pages.img") {
			t.Errorf("%s of a corrupted image = %v, want an error naming %s and pages.img", op, err, cp.ID)
		}
	}
	if recs, _ := h.m.List(ctx); len(recs) != 1 {
		t.Errorf("records after the refused fork and rollback: %d, want only the source", len(recs))
	}
	if ids, _ := h.be.List(ctx); len(ids) != 1 || ids[0] != src.EngineID {
		t.Errorf("engine instances after the refused fork and rollback: %v, want only %s", ids, src.EngineID)
	}
	if got := h.code(t, src.ID, "x"); got != "41" {
		t.Errorf("source after the refused rollback has x = %s", got)
	}
	if err := os.WriteFile(pages, good, 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := h.m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 1, From: "base"})
	if err != nil {
		t.Fatalf("fork of the repaired image: %v", err)
	}
	if got := h.code(t, res.Children[0].Sandbox.ID, "x"); got != "41" {
		t.Errorf("child of the repaired image has x = %s", got)
	}
}
