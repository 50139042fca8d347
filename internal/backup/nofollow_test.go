package backup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/untrusted"
)

// TestBackupWritesNeverFollowALink: in an allowed (root's, empty) backup dir, a link planted
// where the backup writes (secret.key, versions/) is refused, never written or created
// through, and what it points at is untouched: every file and directory is made exclusively.
func TestBackupWritesNeverFollowALink(t *testing.T) {
	state := newState(t)
	dir := filepath.Join(t.TempDir(), "b")
	out, err := makeBackupDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	src, err := untrusted.OpenDir(state)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, nil, 0o644)
	victimDir := t.TempDir()
	os.Symlink(victim, filepath.Join(dir, keyFile))
	os.Symlink(victimDir, filepath.Join(dir, versionDir))
	if _, err := copyFile(context.Background(), src, keyFile, out, keyFile); !errors.Is(err, os.ErrExist) {
		t.Errorf("copying the key onto a planted link: %v, want refused (exists)", err)
	}
	var files []File
	if err := copyTree(context.Background(), src, out, versionDir, versionDir, &files); !errors.Is(err, os.ErrExist) {
		t.Errorf("copying versions/ onto a planted link: %v, want refused (exists)", err)
	}
	if fi, err := os.Stat(victim); err != nil || fi.Size() != 0 || fi.Mode().Perm() != 0o644 {
		t.Errorf("the key's link target was touched: %v %v", fi, err)
	}
	if ents, _ := os.ReadDir(victimDir); len(ents) != 0 {
		t.Errorf("versions/ was written through a link: %d entries in its target", len(ents))
	}
}

// TestRestoreHashesWhatItCopies: a file that no longer matches the manifest when it is copied
// (swapped after the check) is not put in place, and no temporary file is left.
func TestRestoreHashesWhatItCopies(t *testing.T) {
	dir, _ := damagedBackup(t)
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	src, err := untrusted.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	into := t.TempDir()
	f := m.Files[0]
	f.SHA256 = strings.Repeat("0", 64) // as if the file changed after checkFile
	err = restoreFile(context.Background(), src, into, f)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), f.Path+" changed after it was checked") {
		t.Errorf("restoring a file that differs: %v, want refused naming it", err)
	}
	var left []string
	filepath.WalkDir(into, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) != 0 {
		t.Errorf("a refused file left %v", left)
	}
}
