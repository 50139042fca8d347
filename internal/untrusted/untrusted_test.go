package untrusted

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// plant makes, in dir, one of each thing a hostile sandbox could leave where
// the daemon expects a regular file, and returns their names.
func plant(t *testing.T, dir string) map[string]string {
	t.Helper()
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(outside, filepath.Join(dir, "symlink")))
	must(os.Symlink("/dev/zero", filepath.Join(dir, "zero")))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	must(syscall.Mknod(filepath.Join(dir, "null"), syscall.S_IFCHR|0o600, int(mkdev(1, 3))))
	inside := filepath.Join(dir, "orig")
	must(os.WriteFile(inside, []byte("x"), 0o600))
	must(os.Link(inside, filepath.Join(dir, "hardlink")))
	must(os.Mkdir(filepath.Join(dir, "sub"), 0o700))
	must(os.Symlink(filepath.Dir(outside), filepath.Join(dir, "linkdir")))
	return map[string]string{
		"symlink": "symlink", "symlink to /dev/zero": "zero", "fifo": "fifo", "device": "null",
		"hard link": "hardlink", "directory": "sub", "symlink in a component": "linkdir/secret",
		"dot-dot": "../" + filepath.Base(dir) + "/orig",
	}
}

func mkdev(major, minor uint64) uint64 { return major<<8 | minor }

func TestReadFileRefusesEverythingButItsOwnRegularFile(t *testing.T) {
	dir := t.TempDir()
	cases := plant(t, dir)
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for what, name := range cases {
		done := make(chan error, 1)
		go func() { _, err := d.ReadFile(context.Background(), name, 1<<20); done <- err }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s (%s): read succeeded, want a refusal", what, name)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s (%s): ReadFile blocked", what, name)
		}
	}
	// The one regular file of its own, after the hard link is gone, reads.
	os.Remove(filepath.Join(dir, "hardlink"))
	b, err := d.ReadFile(context.Background(), "orig", 10)
	if err != nil || string(b) != "x" {
		t.Fatalf("regular file: %q, %v", b, err)
	}
}

func TestReadFileIsBoundedOnAHugeSparseFile(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil { // 1 TiB, no blocks
		t.Fatal(err)
	}
	f.Close()
	d, _ := OpenDir(dir)
	defer d.Close()
	_, err = d.ReadFile(context.Background(), "big", 4096)
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	// Head reads its n bytes into a buffer of n (not of the size the file claims) and
	// reports that size.
	b, size, err := d.Head(context.Background(), "big", 100)
	if err != nil || len(b) != 100 || cap(b) > 100 || size != 1<<40 {
		t.Fatalf("Head(big, 100) = %d bytes (cap %d), size %d, %v; want 100 of a 1 TiB file", len(b), cap(b), size, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "small"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, size, err := d.Head(context.Background(), "small", 100); err != nil || string(b) != "hello" || size != 5 {
		t.Fatalf("Head(small, 100) = %q, %d, %v", b, size, err)
	}
	if b, err := d.ReadFile(context.Background(), "small", 5); err != nil || string(b) != "hello" {
		t.Fatalf("ReadFile(small, 5) = %q, %v: a file of exactly max bytes is read whole", b, err)
	}
	if _, err := d.ReadFile(context.Background(), "small", 4); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Fatalf("ReadFile(small, 4) = %v, want ErrTooLarge", err)
	}
}

func TestWriteFileNeverFollowsAPlantedName(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(target, []byte("keep"), 0o600)
	os.Symlink(target, filepath.Join(dir, "s"))
	d, _ := OpenDir(dir)
	defer d.Close()
	if err := d.WriteFile("s", []byte("evil"), 0o400); !errors.Is(err, os.ErrExist) {
		t.Fatalf("err = %v, want ErrExist", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("victim now %q", b)
	}
	if err := d.WriteFile("new", []byte("v"), 0o400); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(filepath.Join(dir, "new"))
	if st.Mode().Perm() != 0o400 {
		t.Fatalf("mode %v", st.Mode())
	}
}

// TestWriteFileAsOwnsItsFile: WriteFileAs gives the file its owner and its
// exact mode through its descriptor, refuses a planted name as WriteFile does,
// and reads the daemon's umask right (the mode it leaves to the create).
func TestWriteFileAsOwnsItsFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (chown to another uid)")
	}
	old := syscall.Umask(0o22)
	syscall.Umask(old)
	if got := umask(); got != uint32(old) {
		t.Fatalf("umask() = %o, want %o", got, old)
	}
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(target, []byte("keep"), 0o600)
	os.Symlink(target, filepath.Join(dir, "s"))
	d, _ := OpenDir(dir)
	defer d.Close()
	if err := d.WriteFileAs("s", []byte("evil"), 0o400, 12345, 12345); !errors.Is(err, os.ErrExist) {
		t.Fatalf("err = %v, want ErrExist", err)
	}
	if st, _ := os.Stat(target); st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatal("the symlink's target was chowned")
	}
	if err := d.WriteFileAs("event.json", []byte(`{"a":1}`), 0o400, 12345, 12346); err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(filepath.Join(dir, "event.json"))
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if st.Mode() != 0o400 || sys.Uid != 12345 || sys.Gid != 12346 || st.Size() != 7 {
		t.Fatalf("mode %v uid %d gid %d size %d; want -r-------- 12345 12346 7", st.Mode(), sys.Uid, sys.Gid, st.Size())
	}
	if err := d.WriteFileAs("mine", nil, 0o666, -1, -1); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Lstat(filepath.Join(dir, "mine")); st.Mode() != 0o666 || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("mode %v uid %d; want -rw-rw-rw- owned by root, whatever the umask (%o)", st.Mode(), st.Sys().(*syscall.Stat_t).Uid, old)
	}
}

func TestRemoveAllRemovesLinksNotTheirTargets(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "keep"), []byte("k"), 0o600)
	req := filepath.Join(dir, "req")
	os.MkdirAll(filepath.Join(req, "a", "b"), 0o700)
	os.Symlink(outside, filepath.Join(req, "a", "out"))
	os.Symlink(filepath.Join(outside, "keep"), filepath.Join(req, "a", "b", "f"))
	syscall.Mkfifo(filepath.Join(req, "fifo"), 0o600)
	d, _ := OpenDir(dir)
	defer d.Close()
	if err := d.RemoveAll(context.Background(), "req"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(req); !os.IsNotExist(err) {
		t.Fatalf("req still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Fatalf("target removed: %v", err)
	}
	if err := d.RemoveAll(context.Background(), "req"); err != nil {
		t.Fatalf("second RemoveAll: %v", err)
	}
}

// TestRemoveSubWalksTheOpenDir: RemoveSub removes a directory through the Dir
// already open on it, with many entries (more than one getdents buffer),
// nested and empty directories, links (never followed) and a FIFO.
func TestRemoveSubWalksTheOpenDir(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "keep"), []byte("k"), 0o600)
	req := filepath.Join(dir, "req")
	os.MkdirAll(filepath.Join(req, "tmp"), 0o700)
	os.MkdirAll(filepath.Join(req, "a", "b"), 0o700)
	for i := 0; i < 600; i++ {
		os.WriteFile(filepath.Join(req, "a", fmt.Sprintf("file-with-a-long-name-%04d", i)), nil, 0o600)
	}
	os.Symlink(outside, filepath.Join(req, "out"))
	os.Symlink(filepath.Join(outside, "keep"), filepath.Join(req, "a", "b", "f"))
	syscall.Mkfifo(filepath.Join(req, "fifo"), 0o600)
	d, _ := OpenDir(dir)
	defer d.Close()
	sub, err := d.Sub("req")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.RemoveSub(context.Background(), "req", sub); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(req); !os.IsNotExist(err) {
		t.Fatalf("req still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Fatalf("target removed: %v", err)
	}
	if err := sub.Close(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("sub not closed by RemoveSub: %v", err)
	}
}

// TestRemoveSubRacesAWriter: entries made while RemoveSub walks the directory
// (the first pass ends at a getdents that left room, and the entries made
// after it are found by the final rmdir and the passes after) are removed,
// and the directory with them.
func TestRemoveSubRacesAWriter(t *testing.T) {
	for round := 0; round < 20; round++ {
		dir := t.TempDir()
		req := filepath.Join(dir, "req")
		os.Mkdir(req, 0o700)
		for i := 0; i < 5; i++ {
			os.WriteFile(filepath.Join(req, fmt.Sprintf("f%d", i)), nil, 0o600)
		}
		d, _ := OpenDir(dir)
		sub, err := d.Sub("req")
		if err != nil {
			t.Fatal(err)
		}
		wfd, err := syscall.Open(req, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan int)
		go func() { // creates through its own descriptor until the directory is gone
			n := 0
			for ; n < 2000; n++ {
				fd, err := syscall.Openat(wfd, fmt.Sprintf("w%d", n), syscall.O_CREAT|syscall.O_WRONLY, 0o600)
				if err != nil {
					break
				}
				syscall.Close(fd)
			}
			done <- n
		}()
		err = d.RemoveSub(context.Background(), "req", sub)
		made := <-done
		syscall.Close(wfd)
		if err != nil {
			// A writer as fast as this one can outlast the passes (maxPasses) while it runs:
			// removal then says so, and once the writer has stopped a second removal
			// leaves nothing (the early end of a listing must not hide an entry).
			if !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
				t.Fatalf("round %d (%d made by the writer): %v", round, made, err)
			}
			if err := d.RemoveAll(context.Background(), "req"); err != nil {
				t.Fatalf("round %d: removal after the writer stopped (%d made): %v", round, made, err)
			}
		}
		d.Close()
		if _, err := os.Lstat(req); !os.IsNotExist(err) {
			t.Fatalf("round %d: req still there: %v", round, err)
		}
	}
}

func TestOpenDirRefusesASymlink(t *testing.T) {
	dir := t.TempDir()
	os.Symlink(t.TempDir(), filepath.Join(dir, "l"))
	if _, err := OpenDir(filepath.Join(dir, "l")); err == nil {
		t.Fatal("OpenDir followed a symlink")
	}
}

func TestMkdirRenameAndNamesStayInTheDir(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "victim"), []byte("keep"), 0o600)
	os.Symlink(filepath.Join(outside, "victim"), filepath.Join(dir, "link"))
	os.Symlink(outside, filepath.Join(dir, "linkdir"))
	d, _ := OpenDir(dir)
	defer d.Close()
	if err := d.Mkdir("linkdir", 0o700); !errors.Is(err, os.ErrExist) {
		t.Fatalf("Mkdir over a symlink: %v, want ErrExist", err)
	}
	if err := d.Mkdir("new", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := d.Mkdir("linkdir/x", 0o700); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("Mkdir through a component: %v", err)
	}
	if err := d.WriteFile("staged", []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.Rename("staged", "link"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "victim")); string(b) != "keep" {
		t.Fatalf("rename wrote through the link: %q", b)
	}
	if b, err := d.ReadFile(context.Background(), "link", 10); err != nil || string(b) != "mine" {
		t.Fatalf("renamed file: %q, %v", b, err)
	}
	names, err := d.Names(10)
	if err != nil || len(names) != 3 {
		t.Fatalf("Names = %q, %v", names, err)
	}
	if _, err := d.Names(2); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Fatalf("Names past max: %v", err)
	}
}

// TestCreateIsExclusiveAndNeverFollows: Create makes a new file with its mode; an existing
// name, a symbolic link above all, is refused (os.ErrExist) and its target untouched; a name
// escaping the Dir is refused.
func TestCreateIsExclusiveAndNeverFollows(t *testing.T) {
	root := t.TempDir()
	d, err := OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	f, err := d.Create("new", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if fi, err := os.Lstat(filepath.Join(root, "new")); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("created: %v %v, want a regular file 0600", fi, err)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	os.Symlink(victim, filepath.Join(root, "link"))
	for _, name := range []string{"new", "link"} {
		if _, err := d.Create(name, 0o600); !errors.Is(err, os.ErrExist) {
			t.Errorf("Create(%q) over an existing name: %v, want os.ErrExist", name, err)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("a link's target was written: %q", b)
	}
	if _, err := d.Create("../escape", 0o600); err == nil {
		t.Error("Create(\"../escape\") succeeded, want refused")
	}
}

// TestClosedDirReachesNothing: a Dir used after Close fails, even when its descriptor's
// number was taken since by another directory (a raw descriptor is reused at once).
func TestClosedDirReachesNothing(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(b, "x"), []byte("b's"), 0o600); err != nil {
		t.Fatal(err)
	}
	da, err := OpenDir(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := da.Close(); err != nil {
		t.Fatal(err)
	}
	if err := da.Close(); err == nil {
		t.Error("a second Close succeeded")
	}
	db, err := OpenDir(b)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got, err := da.ReadFile(context.Background(), "x", 100); err == nil {
		t.Fatalf("a closed Dir read %q (through the number the next directory took)", got)
	}
	if err := da.Remove("x"); err == nil {
		t.Fatal("a closed Dir removed a name")
	}
	if _, err := os.Stat(filepath.Join(b, "x")); err != nil {
		t.Fatalf("b's file: %v", err)
	}
}
