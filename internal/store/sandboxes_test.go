package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/sandboxtest"
	"github.com/zygo-run/zygo/internal/store"
)

func openRegistry(t *testing.T, path string) (*store.Store, *store.SandboxRegistry) {
	t.Helper()
	st, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg, err := store.NewSandboxRegistry(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	return st, reg
}

func TestSandboxRegistryContract(t *testing.T) {
	sandboxtest.RunRegistry(t, func(t *testing.T) sandbox.Registry {
		_, reg := openRegistry(t, filepath.Join(t.TempDir(), "zygo.db"))
		return reg
	})
}

// The same contract on the in-memory fake, so the two cannot drift apart.
func TestMemRegistryContract(t *testing.T) {
	sandboxtest.RunRegistry(t, func(*testing.T) sandbox.Registry { return sandbox.NewMemRegistry() })
}

// Records survive closing and reopening the database (a daemon restart), tokens included.
func TestSandboxRegistryPersists(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "zygo.db")
	st, reg := openRegistry(t, path)
	rec := sandbox.SandboxRecord{ID: "sb-1", Name: "one", Backend: "gvisor", EngineID: "sb-1-aaaaaa",
		State: sandbox.Running, Generation: "g", Token: "secret-token"}
	if err := reg.PutSandbox(ctx, rec); err != nil {
		t.Fatal(err)
	}
	cp := sandbox.CheckpointRecord{ID: "cp-1", SandboxID: "sb-1", Backend: "gvisor", Dir: "/x", Token: "cp-token"}
	if err := reg.PutCheckpoint(ctx, cp); err != nil {
		t.Fatal(err)
	}
	st.Close()
	_, reg2 := openRegistry(t, path) // CREATE TABLE IF NOT EXISTS on an existing file
	got, err := reg2.GetSandbox(ctx, "sb-1")
	if err != nil || got.Token != "secret-token" || got.State != sandbox.Running {
		t.Errorf("after reopen: %+v, %v", got, err)
	}
	gcp, err := reg2.GetCheckpoint(ctx, "cp-1")
	if err != nil || gcp.Token != "cp-token" {
		t.Errorf("checkpoint after reopen: %+v, %v", gcp, err)
	}
}

// A snapshot (zygo backup) holds no sandbox records: a daemon started on a restored store
// beside the first must not adopt or destroy the first's running sandboxes. Checkpoints stay.
func TestSnapshotHoldsNoSandboxes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	_, reg := openRegistry(t, filepath.Join(dir, "zygo.db"))
	if err := reg.PutSandbox(ctx, sandbox.SandboxRecord{ID: "sb-1", Name: "one", Backend: "gvisor", EngineID: "sb-1-aaaaaa",
		State: sandbox.Running, Generation: "g", Token: "t"}); err != nil {
		t.Fatal(err)
	}
	if err := reg.PutCheckpoint(ctx, sandbox.CheckpointRecord{ID: "cp-1", SandboxID: "sb-1", Backend: "gvisor", Dir: "/x", Token: "c"}); err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "copy.db")
	if err := store.Snapshot(ctx, filepath.Join(dir, "zygo.db"), copyPath); err != nil {
		t.Fatal(err)
	}
	_, creg := openRegistry(t, copyPath)
	if sbs, err := creg.ListSandboxes(ctx); err != nil || len(sbs) != 0 {
		t.Errorf("the copy's sandboxes: %v, %v; want none", sbs, err)
	}
	if _, err := creg.GetCheckpoint(ctx, "cp-1"); err != nil {
		t.Errorf("the copy's checkpoint: %v", err)
	}
	if sbs, err := reg.ListSandboxes(ctx); err != nil || len(sbs) != 1 {
		t.Errorf("the original's sandboxes: %v, %v; want its one", sbs, err)
	}
}
