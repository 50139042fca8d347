package gvisor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/zygo-run/zygo/internal/sandbox"
)

// fakeIDs hands out ids from first up, one per owner.
type fakeIDs struct {
	mu    sync.Mutex // guards ids, next
	ids   map[string]uint32
	next  uint32
	freed []string
}

func newFakeIDs(first uint32) *fakeIDs { return &fakeIDs{ids: map[string]uint32{}, next: first} }

func (f *fakeIDs) Acquire(ctx context.Context, owner string) (uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id, ok := f.ids[owner]; ok {
		return id, nil
	}
	f.ids[owner] = f.next
	f.next++
	return f.ids[owner], nil
}

func (f *fakeIDs) Release(ctx context.Context, owner string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.ids[owner]; ok {
		f.freed = append(f.freed, owner)
	}
	delete(f.ids, owner)
	return nil
}

func (f *fakeIDs) of(owner string) (uint32, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.ids[owner]
	return id, ok
}

// procIDs returns the real uid and gid of pid and its uid_map's first line.
func procIDs(t *testing.T, pid int) (uid, gid, uidMap string) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("reading status of %d: %v", pid, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && (k == "Uid" || k == "Gid") {
			f := strings.Fields(v)
			if k == "Uid" {
				uid = strings.Join(f, " ")
			} else {
				gid = strings.Join(f, " ")
			}
		}
	}
	m, _ := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
	return uid, gid, strings.Join(strings.Fields(string(m)), " ")
}

// engineProcs returns the sandbox process of engine instance id (its pid file) and the gofer
// (the other runsc process whose command line names id).
func engineProcs(t *testing.T, h *harness, engineID string) (sandboxPID, goferPID int) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(h.be.InstanceDir(engineID), "sandbox.pid"))
	if err != nil {
		t.Fatalf("reading pid file of %s: %v", engineID, err)
	}
	sandboxPID, _ = strconv.Atoi(strings.TrimSpace(string(raw)))
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == sandboxPID {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(string(cmd), "\x00")
		if len(args) > 1 && strings.Contains(args[0], "runsc-gofer") && strings.Contains(string(cmd), engineID) {
			goferPID = pid
		}
	}
	if goferPID == 0 {
		t.Fatalf("no gofer process of %s", engineID)
	}
	return sandboxPID, goferPID
}

// checkRunsAs fails unless the sandbox and gofer processes of sandbox rec run as host uid and
// gid want, in a user namespace that maps root to want alone.
func checkRunsAs(t *testing.T, h *harness, rec sandbox.SandboxRecord, want uint32) {
	t.Helper()
	sp, gp := engineProcs(t, h, rec.EngineID)
	w := strconv.FormatUint(uint64(want), 10)
	all := strings.Repeat(w+" ", 4)[:4*len(w)+3]
	for _, pid := range []int{sp, gp} {
		uid, gid, m := procIDs(t, pid)
		t.Logf("%s: pid %d uid %s gid %s uid_map %q", rec.ID, pid, uid, gid, m)
		if uid != all || gid != all || m != "0 "+w+" 1" {
			t.Errorf("%s: engine process %d runs as uid %q gid %q, uid_map %q; want %s, map \"0 %s 1\"", rec.ID, pid, uid, gid, m, w, w)
		}
	}
}

// Each sandbox runs as its own host uid: the sandbox and gofer processes of a created
// sandbox, of each fork child (its own), and of a rolled-back sandbox (its sandbox's). Nothing
// of the guest changes: it is root inside, and every operation still works.
func TestEachSandboxRunsAsItsOwnHostUID(t *testing.T) {
	ids := newFakeIDs(0x70100000)
	h := &harness{dir: stateDir(t), reg: sandbox.NewMemRegistry(), ids: ids}
	h.open(t, nil)
	t.Cleanup(func() { h.removeAll(t) })
	ctx := tctx(t)
	src, err := h.m.Create(ctx, sandbox.CreateOptions{Name: "src"})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	srcUID, ok := ids.of("sandbox:" + src.ID)
	if !ok {
		t.Fatalf("no host uid for %s", src.ID)
	}
	checkRunsAs(t, h, src, srcUID)
	if got := h.sh(t, src.ID, "id -u; id -g"); got != "0\n0\n" {
		t.Errorf("guest ids %q, want root", got)
	}
	if err := h.m.PutFile(ctx, src.ID, "/root/f", 0o644, strings.NewReader("v1")); err != nil {
		t.Fatal(err)
	}
	h.code(t, src.ID, "x = 7")
	cp, err := h.m.Checkpoint(ctx, src.ID, "base")
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	res, err := h.m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 2, From: cp.ID})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	seen := map[uint32]string{srcUID: src.ID}
	for i, c := range res.Children {
		if c.Err != nil {
			t.Fatalf("child %d: %v", i, c.Err)
		}
		uid, ok := ids.of("sandbox:" + c.Sandbox.ID)
		if !ok || seen[uid] != "" {
			t.Fatalf("child %s has uid %d (%v), already %q's", c.Sandbox.ID, uid, ok, seen[uid])
		}
		seen[uid] = c.Sandbox.ID
		checkRunsAs(t, h, c.Sandbox, uid)
		if got := h.file(t, c.Sandbox.ID, "/root/f"); got != "v1" {
			t.Errorf("child %s reads %q", c.Sandbox.ID, got)
		}
		if got := h.code(t, c.Sandbox.ID, "x"); got != "7" {
			t.Errorf("child %s: x = %s", c.Sandbox.ID, got)
		}
	}
	kid := res.Children[0].Sandbox
	rb, err := h.m.Rollback(ctx, kid.ID, cp.ID)
	if err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	checkRunsAs(t, h, rb, mustUID(t, ids, kid.ID))
	if err := h.m.Remove(ctx, kid.ID); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, ok := ids.of("sandbox:" + kid.ID); ok {
		t.Errorf("removed sandbox %s still holds its uid", kid.ID)
	}
}

func mustUID(t *testing.T, ids *fakeIDs, id string) uint32 {
	t.Helper()
	uid, ok := ids.of("sandbox:" + id)
	if !ok {
		t.Fatalf("no host uid for %s", id)
	}
	return uid
}
