package pool

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMountEscape makes a detached read-only mount of one tenant's script
// directory, as Run does, and tries to leave it through /proc/self/fd/N:
// "..", "../..", an absolute-looking walk and openat with "..", and to
// write inside it. Only the script's own files are reachable, and none is
// writable.
func TestMountEscape(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test makes mounts: run it as root (sudo go test ./internal/pool -run TestMountEscape)")
	}
	root := t.TempDir()
	mine := filepath.Join(root, "tenant-a", "h1")
	theirs := filepath.Join(root, "tenant-b", "h2")
	for _, d := range []string{mine, theirs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(mine, "main.py"), []byte("mine"), 0o644)
	os.WriteFile(filepath.Join(theirs, "main.py"), []byte("theirs"), 0o644)
	f, err := mountRO(mine)
	if err != nil {
		t.Fatalf("mountRO: %v", err)
	}
	defer f.Close()
	base := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	names := func(p string) []string {
		es, err := os.ReadDir(p)
		if err != nil {
			t.Fatalf("listing %s: %v", p, err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}
	for _, p := range []string{base, base + "/..", base + "/../..", base + "/../../../../.."} {
		if got := names(p); len(got) != 1 || got[0] != "main.py" {
			t.Errorf("%s lists %v; want only main.py (the script's own directory)", p, got)
		}
	}
	if b, err := os.ReadFile(base + "/../../tenant-b/h2/main.py"); err == nil {
		t.Errorf("read another tenant's script through the mount: %q", b)
	}
	fd, err := unix.Openat(int(f.Fd()), "..", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	up := os.NewFile(uintptr(fd), "up")
	defer up.Close()
	if got, _ := up.Readdirnames(-1); len(got) != 1 || got[0] != "main.py" {
		t.Errorf("openat(mount, \"..\") lists %v; want only main.py", got)
	}
	if err := os.WriteFile(base+"/new.py", []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("creating a file in the script mount: %v; want EROFS", err)
	}
	if err := os.WriteFile(base+"/main.py", []byte("x"), 0o644); err == nil {
		t.Error("overwrote the script through the read-only mount")
	}
}
