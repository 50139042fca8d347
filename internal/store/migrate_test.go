package store_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/store"
)

// makeFixture writes the DDL and rows of testdata/schemas/name into a new SQLite file, as
// the daemon of that schema left it, and returns its path.
func makeFixture(t *testing.T, name string) string {
	t.Helper()
	sqlText, err := os.ReadFile(filepath.Join("testdata", "schemas", name))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "zygo.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(string(sqlText)); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return path
}

func userVersion(t *testing.T, db *sql.DB) int {
	t.Helper()
	var v int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMigrationsFrom: a store of every earlier schema (testdata/schemas, one file per schema
// that shipped, each made by that commit's DDL) opens with today's code, keeps every row it
// had, is at SchemaVersion, takes today's writes (checkpoint checksums, host ids, the host
// range) and opens again unchanged.
func TestMigrationsFrom(t *testing.T) {
	ctx := context.Background()
	fixtures, err := filepath.Glob(filepath.Join("testdata", "schemas", "*.sql"))
	if err != nil || len(fixtures) < 5 {
		t.Fatalf("fixtures %v, %v", fixtures, err)
	}
	for _, f := range fixtures {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			raw, _ := os.ReadFile(f)
			has := func(table string) bool { return strings.Contains(string(raw), "CREATE TABLE IF NOT EXISTS "+table+" ") }
			path := makeFixture(t, name)
			st, reg := openRegistry(t, path)
			if v := userVersion(t, st.DB()); v != store.SchemaVersion {
				t.Errorf("user_version %d, want %d", v, store.SchemaVersion)
			}
			fn, err := st.Function(ctx, "hello")
			if err != nil || fn.Active.Hash != "sha256:aa" || string(fn.Active.Manifest) != `{"name":"hello"}` {
				t.Errorf("function after migration: %+v, %v", fn, err)
			}
			lines, err := st.Logs(ctx, store.LogQuery{Function: "hello", RequestID: "req-1"})
			if err != nil || len(lines) != 1 || lines[0].Line != "hello from before" {
				t.Errorf("logs after migration: %+v, %v", lines, err)
			}
			var secrets int
			if err := st.DB().QueryRow(`SELECT count(*) FROM secrets`).Scan(&secrets); err != nil || secrets != 1 {
				t.Errorf("secrets rows %d, %v, want 1", secrets, err)
			}
			if has("sandboxes") {
				sb, err := reg.GetSandbox(ctx, "sb-1")
				if err != nil || sb.Token != "sb-token" || sb.State != sandbox.Running || sb.Name != "one" {
					t.Errorf("sandbox after migration: %+v, %v", sb, err)
				}
				cp, err := reg.GetCheckpoint(ctx, "cp-old")
				if err != nil || cp.Checksums != nil || cp.SizeBytes != 42 || cp.Token != "cp-token" || cp.Tag != "base" {
					t.Errorf("checkpoint after migration: %+v, %v", cp, err)
				}
			}
			r := store.IDRange{First: 100000, Count: 65536}
			wantID := uint32(100000)
			if has("host_ids") {
				wantID = 100042
			}
			if id, err := st.AcquireHostID(ctx, "function:hello", r, func(uint32) bool { return false }); err != nil || id != wantID {
				t.Errorf("host id of hello: %d, %v, want %d", id, err, wantID)
			}
			if got, err := st.HostRange(ctx); err != nil || (has("host_range") && got != r) || (!has("host_range") && got != store.IDRange{}) {
				t.Errorf("host range %+v, %v", got, err)
			}
			// Today's writes work on the migrated file.
			sums := map[string]string{"pages.img": "crc32c:00c0ffee"}
			if err := reg.PutCheckpoint(ctx, sandbox.CheckpointRecord{ID: "cp-new", SandboxID: "sb-1", Backend: "gvisor",
				Dir: "/images/cp-new", Token: "t", Checksums: sums}); err != nil {
				t.Fatal(err)
			}
			if err := st.SetHostRange(ctx, r); err != nil {
				t.Fatal(err)
			}
			st.Close()
			st2, reg2 := openRegistry(t, path) // at SchemaVersion: no step runs
			if v := userVersion(t, st2.DB()); v != store.SchemaVersion {
				t.Errorf("user_version after reopen %d", v)
			}
			if cp, err := reg2.GetCheckpoint(ctx, "cp-new"); err != nil || cp.Checksums["pages.img"] != sums["pages.img"] {
				t.Errorf("new checkpoint after reopen: %+v, %v", cp, err)
			}
		})
	}
}

// TestMigrationsRefuseNewerStore: a file a newer daemon migrated past SchemaVersion is refused
// with its version named, and left as it was.
func TestMigrationsRefuseNewerStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "zygo.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE future (x); PRAGMA user_version = 999`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if st, err := store.Open(context.Background(), path); err == nil || !strings.Contains(err.Error(), "schema version 999") {
		if st != nil {
			st.Close()
		}
		t.Fatalf("Open of a newer store: %v, want refused naming version 999", err)
	}
	db, _ = sql.Open("sqlite", "file:"+path)
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'functions'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the refused store was changed: functions table %d, %v", n, err)
	}
}
