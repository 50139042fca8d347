package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestSnapshotNeverThroughALink: a symbolic link (or any file) planted at the copy's path is
// refused, and what it points at is neither written nor chmodded; a fresh path gets a 0600 copy.
func TestSnapshotNeverThroughALink(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "zygo.db")
	st, err := Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "copy.db")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if err := Snapshot(context.Background(), db, link); !errors.Is(err, os.ErrExist) {
		t.Errorf("snapshot onto a link: %v, want refused (exists)", err)
	}
	if fi, err := os.Stat(victim); err != nil || fi.Size() != 0 || fi.Mode().Perm() != 0o644 {
		t.Errorf("the link's target was touched: %v %v", fi, err)
	}
	fresh := filepath.Join(dir, "fresh.db")
	if err := Snapshot(context.Background(), db, fresh); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(fresh); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Size() == 0 {
		t.Errorf("the copy: %v %v, want a non-empty regular file 0600", fi, err)
	}
	if _, err := SnapshotVersions(context.Background(), fresh); err != nil {
		t.Errorf("reading the copy: %v", err)
	}
}
