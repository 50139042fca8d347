package pool

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/store"
)

// fakeIDs is a function.HostIDs giving every owner the same uid, which a
// test changes to play a daemon restarted on another uid range.
type fakeIDs struct{ uid uint32 }

func (f *fakeIDs) Acquire(context.Context, string) (uint32, error) { return f.uid, nil }
func (f *fakeIDs) Release(context.Context, string) error           { return nil }

// TestRestoreRegroupsForANewUID: a pool's boot module and every tenant's
// scripts, stored under one uid, belong to the pool's new uid after a
// restart that gave it another; a partial write a crash left is removed.
func TestRestoreRegroupsForANewUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test changes file groups: run it as root")
	}
	state := t.TempDir()
	ids := &fakeIDs{uid: 61000}
	reg := &memRegistry{pools: map[string]store.PoolRecord{}}
	ctx := context.Background()
	raw := []byte("kind = \"pool\"\nname = \"p\"\nisolation = \"zygote-per-tenant\"\n")
	m := NewManager(Config{StateDir: state, HostIDs: ids}, reg)
	p, err := m.makePool(ctx, "p", raw, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"acme", "evil"} {
		if _, err := p.scripts.put(tenant, Script{ScriptFile: []byte("def handler(e, c):\n    return 1\n"), "lib/x.py": nil}); err != nil {
			t.Fatal(err)
		}
	}
	partial := filepath.Join(p.scripts.root, "acme", ".partial-1")
	if err := os.MkdirAll(partial, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := reg.PutPool(ctx, store.PoolRecord{Name: "p", Manifest: raw, Created: p.created}); err != nil {
		t.Fatal(err)
	}
	m.Shutdown()
	root := filepath.Join(state, "pools", "p")
	if n := countGID(t, root, 61000); n == 0 {
		t.Fatal("no file has the first uid's group: the test proves nothing")
	}

	ids.uid = 62000
	m2 := NewManager(Config{StateDir: state, HostIDs: ids}, reg)
	defer m2.Shutdown()
	if err := m2.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if m2.lookup("p") == nil {
		t.Fatal("pool p was not restored")
	}
	if n := countGID(t, root, 61000); n != 0 {
		t.Errorf("%d files still have the old uid's group 61000", n)
	}
	for _, dir := range []string{filepath.Join(root, "boot", m2.lookup("p").bootHash), filepath.Join(root, "scripts", "acme"), filepath.Join(root, "scripts", "evil")} {
		if n := countGID(t, dir, 62000); n == 0 {
			t.Errorf("nothing under %s has the new uid's group 62000", dir)
		}
	}
	if _, err := os.Stat(partial); !os.IsNotExist(err) {
		t.Errorf("the partial write %s is still there (%v)", partial, err)
	}
}

// countGID counts the files and directories beneath root (root included)
// whose group is gid.
func countGID(t *testing.T, root string, gid uint32) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if info.Sys().(*syscall.Stat_t).Gid == gid {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSharedIsolationNeedsScoping: a shared pool is refused, naming
// isolation and the way out, when its zygote reports a kernel without
// Landlock scoping; a kernel with it passes.
func TestSharedIsolationNeedsScoping(t *testing.T) {
	old := agentproc.Ready{Checks: []agentproc.Check{{Name: "landlock", Level: "warn",
		Detail: "Landlock ABI 4 (scoping needs ABI 6: Linux 6.12 with landlock in lsm=): ..."}}}
	err := sharedIsolationSupported(old)
	if !errdefs.IsInvalidArgument(err) {
		t.Fatalf("err = %v; want an invalid argument", err)
	}
	for _, want := range []string{"isolation", "Landlock ABI 4", `"zygote-per-tenant"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	recent := agentproc.Ready{Checks: []agentproc.Check{{Name: "landlock", Level: "info", Detail: "Landlock ABI 7: ..."}}}
	if err := sharedIsolationSupported(recent); err != nil {
		t.Errorf("ABI 7 refused: %v", err)
	}
}
