package backup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/store"
)

// newState makes a state dir with a store, a key and one version's code.
func newState(t *testing.T) string {
	t.Helper()
	state := t.TempDir()
	st, err := store.Open(context.Background(), filepath.Join(state, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutVersion(context.Background(), store.Version{Function: "fn", Hash: "sha256:" + strings.Repeat("ab", 32), Manifest: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	code := filepath.Join(state, versionDir, "fn", strings.Repeat("ab", 16))
	os.MkdirAll(code, 0o750)
	os.WriteFile(filepath.Join(code, "main.py"), []byte("x = 1\n"), 0o440)
	os.WriteFile(filepath.Join(state, keyFile), []byte(strings.Repeat("k", 32)), 0o600)
	return state
}

// TestCreateAndRestore: a backup round-trips the store, the key and the code, with modes;
// the manifest counts the version; a restore refuses a state dir that is not empty.
func TestCreateAndRestore(t *testing.T) {
	state := newState(t)
	dir := filepath.Join(t.TempDir(), "b")
	m, err := Create(context.Background(), state, dir, Options{ZygoVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Includes.Store || !m.Includes.SecretKey || m.Includes.APIToken || m.Includes.Versions != 1 || m.Includes.Checkpoints {
		t.Errorf("includes %+v", m.Includes)
	}
	into := filepath.Join(t.TempDir(), "state")
	if _, err := Restore(dir, into, false); err != nil {
		t.Fatal(err)
	}
	code := filepath.Join(into, versionDir, "fn", strings.Repeat("ab", 16), "main.py")
	if st, err := os.Stat(code); err != nil || st.Mode().Perm() != 0o440 {
		t.Errorf("restored code: %v, mode %v; want 0440", err, st.Mode().Perm())
	}
	vs, err := store.SnapshotVersions(context.Background(), filepath.Join(into, dbFile))
	if err != nil || len(vs) != 1 || vs[0].Function != "fn" {
		t.Errorf("restored store's versions: %v %v", vs, err)
	}
	if _, err := Restore(dir, into, false); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "is not empty") {
		t.Errorf("restore into a restored state dir: %v, want refused as not empty", err)
	}
	if _, err := Restore(dir, into, true); err != nil {
		t.Errorf("--force: %v", err)
	}
	if _, err := Create(context.Background(), state, dir, Options{}); err == nil || !strings.Contains(err.Error(), "is not empty") {
		t.Errorf("a backup into a backup: %v, want refused", err)
	}
}

// TestCreateRefusesALink: a link in what is copied (a sandbox engine could plant one under
// images/) fails the backup, never followed, and the failed backup leaves nothing.
func TestCreateRefusesALink(t *testing.T) {
	state := newState(t)
	os.MkdirAll(filepath.Join(state, imageDir, "cp-1"), 0o700)
	if err := os.Symlink("/etc/shadow", filepath.Join(state, imageDir, "cp-1", "pages.img")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "b")
	_, err := Create(context.Background(), state, dir, Options{Checkpoints: true})
	if err == nil || !strings.Contains(err.Error(), "images/cp-1") {
		t.Fatalf("backup over a link: %v, want an error naming images/cp-1", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a failed backup left %d entries", len(ents))
	}
}

// TestReadManifestRefuses: a manifest naming a path a backup never holds, or another format,
// is refused before anything is read or written.
func TestReadManifestRefuses(t *testing.T) {
	for body, want := range map[string]string{
		`{"format": 1, "files": [{"path": "../etc/passwd"}]}`: `"../etc/passwd" is not a path a backup holds`,
		`{"format": 1, "files": [{"path": "/etc/passwd"}]}`:   `"/etc/passwd" is not a path`,
		`{"format": 1, "files": [{"path": "zygo.lock"}]}`:     `"zygo.lock" is not a path`,
		`{"format": 1, "files": [{"path": "versions"}]}`:      `"versions" is not a path`,
		`{"format": 1, "files": [{"path": "zygo.db/x"}]}`:     `"zygo.db/x" is not a path`,
		`{"format": 2, "files": []}`:                          "format 2, but this zygo reads format 1",
		`not json`:                                            "zygo-backup.json",
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, ManifestFile), []byte(body), 0o600)
		if _, err := ReadManifest(dir); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
	if _, err := ReadManifest(t.TempDir()); err == nil || !strings.Contains(err.Error(), "is not a Zygo backup") {
		t.Errorf("no manifest: %v", err)
	}
}
