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

// oldCheckpointsTable is the checkpoints table as the first daemons with sandboxes made it,
// before image checksums.
const oldCheckpointsTable = `
CREATE TABLE checkpoints (
	id TEXT PRIMARY KEY, tag TEXT NOT NULL DEFAULT '', sandbox_id TEXT NOT NULL,
	parent_id TEXT NOT NULL DEFAULT '', backend TEXT NOT NULL, dir TEXT NOT NULL,
	size_bytes INTEGER NOT NULL, token TEXT NOT NULL, generation TEXT NOT NULL,
	hostname TEXT NOT NULL, options TEXT NOT NULL, created_at INTEGER NOT NULL);
INSERT INTO checkpoints VALUES ('cp-old', 'base', 'sb-1', '', 'gvisor', '/images/cp-old', 42,
	'tok', 'gen', 'h', '{}', 1);`

// A store made before checksums existed gets the column; its checkpoints load without
// checksums (restored unverified), new ones keep theirs, and reopening changes nothing.
func TestSandboxRegistryMigratesChecksums(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "zygo.db")
	st, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, oldCheckpointsTable); err != nil {
		t.Fatal(err)
	}
	st.Close()
	_, reg := openRegistry(t, path)
	old, err := reg.GetCheckpoint(ctx, "cp-old")
	if err != nil || old.Checksums != nil || old.SizeBytes != 42 || old.Tag != "base" {
		t.Fatalf("old checkpoint after migration: %+v, %v", old, err)
	}
	sums := map[string]string{"pages.img": "crc32c:00c0ffee"}
	if err := reg.PutCheckpoint(ctx, sandbox.CheckpointRecord{ID: "cp-new", SandboxID: "sb-1", Backend: "gvisor",
		Dir: "/images/cp-new", Token: "t", Checksums: sums}); err != nil {
		t.Fatal(err)
	}
	_, reg2 := openRegistry(t, path) // the column exists now: nothing to migrate
	all, err := reg2.ListCheckpoints(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("after reopen: %+v, %v", all, err)
	}
	for _, cp := range all {
		if cp.ID == "cp-new" && cp.Checksums["pages.img"] != sums["pages.img"] {
			t.Errorf("new checkpoint's checksums %v, want %v", cp.Checksums, sums)
		}
		if cp.ID == "cp-old" && cp.Checksums != nil {
			t.Errorf("old checkpoint grew checksums: %v", cp.Checksums)
		}
	}
}
