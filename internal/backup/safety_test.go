package backup

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// TestCreateRefusesADirAnotherUserCanChange: an existing empty backup dir owned by another
// user (uid 65534), or one under a directory another user owns, is refused naming it, and
// nothing is written into it (its owner could plant links there to redirect root's writes).
func TestCreateRefusesADirAnotherUserCanChange(t *testing.T) {
	state := newState(t)
	theirs := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(theirs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := Create(context.Background(), state, theirs, Options{})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), theirs) || !strings.Contains(err.Error(), "uid 65534") {
		t.Errorf("a backup into a dir of uid 65534: %v, want refused naming it and its owner", err)
	}
	if ents, _ := os.ReadDir(theirs); len(ents) != 0 {
		t.Errorf("the refused dir got %d entries", len(ents))
	}
	under := filepath.Join(theirs, "b")
	if _, err := Create(context.Background(), state, under, Options{}); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), theirs) {
		t.Errorf("a backup into a new dir under a dir of uid 65534: %v, want refused naming the parent", err)
	}
	if _, err := os.Lstat(under); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a backup dir was made under another user's dir: %v", err)
	}
	open := filepath.Join(t.TempDir(), "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o777)
	if _, err := Create(context.Background(), state, open, Options{}); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "writable by its group or by others") {
		t.Errorf("a backup into an empty 0777 dir: %v, want refused", err)
	}
	ours := filepath.Join(t.TempDir(), "ours")
	os.Mkdir(ours, 0o755)
	if _, err := Create(context.Background(), state, ours, Options{}); err != nil {
		t.Errorf("a backup into an empty dir of root's: %v", err)
	}
	if fi, err := os.Stat(ours); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("backup dir: %v %v, want 0700", fi, err)
	}
}

// damagedBackup makes a backup of a fresh state and returns its dir and the path of its one
// file of code.
func damagedBackup(t *testing.T) (dir, code string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "b")
	if _, err := Create(context.Background(), newState(t), dir, Options{}); err != nil {
		t.Fatal(err)
	}
	return dir, filepath.Join(dir, versionDir, "fn", strings.Repeat("ab", 16), "main.py")
}

// restoreSoon runs Restore, failing the test if it has not returned within a minute (a restore
// blocked on a FIFO would never return).
func restoreSoon(t *testing.T, dir, into string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := Restore(dir, into, false)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("restore of %s still running after a minute (blocked on a FIFO?)", dir)
		return nil
	}
}

// TestRestoreRefusesWhatIsNotARegularFile: a FIFO, a symbolic link (to /etc/shadow) and a link
// on a file's path (a directory of the backup replaced by a link to a copy of it) are refused
// with an error naming the file, without blocking, and nothing is restored.
func TestRestoreRefusesWhatIsNotARegularFile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, dir, code string)
		want  string
	}{
		{"fifo", func(t *testing.T, dir, code string) {
			os.Remove(code)
			if err := syscall.Mkfifo(code, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "main.py is not a regular file"},
		{"symlink", func(t *testing.T, dir, code string) {
			os.Remove(code)
			if err := os.Symlink("/etc/shadow", code); err != nil {
				t.Fatal(err)
			}
		}, "main.py is not a regular file"},
		{"linked dir", func(t *testing.T, dir, code string) {
			fn := filepath.Join(dir, versionDir, "fn")
			elsewhere := filepath.Join(t.TempDir(), "fn")
			if err := os.Rename(fn, elsewhere); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(elsewhere, fn); err != nil {
				t.Fatal(err)
			}
		}, "main.py is not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, code := damagedBackup(t)
			tc.plant(t, dir, code)
			into := filepath.Join(t.TempDir(), "state")
			err := restoreSoon(t, dir, into)
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("restore: %v, want %q", err, tc.want)
			}
			if _, err := os.Lstat(into); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused restore made the state dir: %v", err)
			}
		})
	}
}

// TestRestoreModesAreNotTheManifests: a manifest asking for a world-readable key, a
// world-writable store and world-writable, setuid code gets 0600, 0600 and at most 0755.
func TestRestoreModesAreNotTheManifests(t *testing.T) {
	dir, _ := damagedBackup(t)
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	asked := map[string]uint32{keyFile: 0o644, dbFile: 0o666}
	for i, f := range m.Files {
		if mode, ok := asked[f.Path]; ok {
			m.Files[i].Mode = mode
		} else if strings.HasSuffix(f.Path, "main.py") {
			m.Files[i].Mode = 0o4777
		}
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	into := filepath.Join(t.TempDir(), "state")
	if _, err := Restore(dir, into, false); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{
		keyFile: 0o600, dbFile: 0o600,
		filepath.Join(versionDir, "fn", strings.Repeat("ab", 16), "main.py"): 0o755,
	} {
		if fi, err := os.Stat(filepath.Join(into, p)); err != nil || fi.Mode()&(os.ModePerm|os.ModeSetuid) != want {
			t.Errorf("restored %s: %v, mode %v; want %v", p, err, fi.Mode(), want)
		}
	}
	for mode, want := range map[uint32]os.FileMode{0o666: 0o644, 0o440: 0o440, 0o777: 0o755, 0o2750: 0o750, 0o620: 0o600} {
		if got := restoreMode(File{Path: "versions/fn/h/x", Mode: mode}); got != want {
			t.Errorf("restoreMode(%o) = %o, want %o", mode, got, want)
		}
	}
	for _, p := range []string{tokenFile, dbFile + "-wal", dbFile + "-shm"} {
		if got := restoreMode(File{Path: p, Mode: 0o777}); got != 0o600 {
			t.Errorf("restoreMode(%s, 0777) = %o, want 0600", p, got)
		}
	}
}

// TestPoolsFilesAreNotBackedUp: what a runtime pool keeps on disk (pools/NAME/boot/, the
// tenants' scripts under pools/NAME/scripts/) is left out of a backup, as documented (the
// pools come back from the store and remake their boot module; scripts are a cache tenants
// upload again on a 404), and a manifest naming a file under pools/ is refused.
func TestPoolsFilesAreNotBackedUp(t *testing.T) {
	state := newState(t)
	script := filepath.Join(state, "pools", "p", "scripts", "t1", strings.Repeat("cd", 32))
	os.MkdirAll(script, 0o750)
	os.WriteFile(filepath.Join(script, "main.py"), []byte("def handler(e): return e\n"), 0o440)
	boot := filepath.Join(state, "pools", "p", "boot", strings.Repeat("ef", 32))
	os.MkdirAll(boot, 0o750)
	os.WriteFile(filepath.Join(boot, "zygo_pool_boot.py"), []byte("import json\n"), 0o440)
	dir := filepath.Join(t.TempDir(), "b")
	m, err := Create(context.Background(), state, dir, Options{Checkpoints: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		if strings.HasPrefix(f.Path, "pools/") {
			t.Errorf("a backup holds %s", f.Path)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "pools")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the backup dir holds pools/: %v", err)
	}
	os.WriteFile(filepath.Join(dir, ManifestFile), []byte(`{"format": 1, "files": [{"path": "pools/p/scripts/t1/x/main.py"}]}`), 0o600)
	if _, err := ReadManifest(dir); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "is not a path a backup holds") {
		t.Errorf("a manifest naming pools/: %v, want refused", err)
	}
}
