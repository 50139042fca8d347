package trusted_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/trusted"
)

// other is a uid that is neither root nor the test's: the "local user".
const other = 12345

// base returns a root-owned 0755 directory under a root-owned parent chain
// (t.TempDir's), removed when the test ends.
func base(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("these tests need root: they chown directories to another uid")
	}
	d := t.TempDir()
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func mkdir(t *testing.T, p string, mode os.FileMode, uid int) string {
	t.Helper()
	if err := os.Mkdir(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
	return p
}

// A directory, or any ancestor, owned by another uid or writable by its
// group or others is refused, naming the path and the owner; a root-owned
// sticky ancestor (like /tmp) is fine, and so is a link to a trusted dir.
func TestDirRefusesWhatAnotherUserCouldChange(t *testing.T) {
	b := base(t)
	good := mkdir(t, filepath.Join(b, "good"), 0o711, 0)
	if err := trusted.Dir(good, 0); err != nil {
		t.Fatalf("a root-owned 0711 dir: %v", err)
	}
	sticky := mkdir(t, filepath.Join(b, "tmp"), os.ModeSticky|0o777, 0)
	under := mkdir(t, filepath.Join(sticky, "st"), 0o700, 0)
	if err := trusted.Dir(under, 0); err != nil {
		t.Errorf("a root dir under a sticky root-owned one: %v", err)
	}
	if err := trusted.Dir(sticky, 0); err == nil {
		t.Error("a 1777 dir itself was accepted")
	}
	if err := os.Symlink(good, filepath.Join(b, "link")); err != nil {
		t.Fatal(err)
	}
	if err := trusted.Dir(filepath.Join(b, "link"), 0); err != nil {
		t.Errorf("a link to a trusted dir: %v", err)
	}
	owned := mkdir(t, filepath.Join(sticky, "atk"), 0o777, other)
	inOwned := mkdir(t, filepath.Join(owned, "st"), 0o711, 0)
	groupW := mkdir(t, filepath.Join(b, "gw"), 0o775, 0)
	if err := os.Symlink(inOwned, filepath.Join(b, "badlink")); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ dir, want string }{
		"owned by another uid":       {owned, "uid 12345"},
		"under a dir of another uid": {inOwned, owned + " is owned by uid 12345"},
		"group-writable":             {groupW, "mode 775"},
		"a link into another's dir":  {filepath.Join(b, "badlink"), owned + " is owned by uid 12345"},
	} {
		err := trusted.Dir(c.dir, 0)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, c.want)
		}
	}
	// The daemon's own euid may own it too.
	if err := trusted.Dir(owned, other); err == nil || !strings.Contains(err.Error(), "mode 777") {
		t.Errorf("a 0777 dir of the euid: %v", err)
	}
}

// An entry another uid put in the directory is refused by name and owner.
func TestEntriesRefusesAnotherUsersEntry(t *testing.T) {
	b := base(t)
	mkdir(t, filepath.Join(b, "versions"), 0o711, 0)
	if err := trusted.Entries(b, 0); err != nil {
		t.Fatalf("only root's entries: %v", err)
	}
	mkdir(t, filepath.Join(b, "agents"), 0o755, other)
	err := trusted.Entries(b, 0)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(b, "agents")) || !strings.Contains(err.Error(), "uid 12345") {
		t.Errorf("another uid's agents/: %v", err)
	}
}
