package e2esandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// zygo sandbox files put/get copy directories file by file, keeping each file's mode; a
// directory to stdout is refused, and a DEST that is an existing directory receives the copy
// under its own name (docker cp's rule).
func TestFilesCopyDirectories(t *testing.T) {
	d := startDaemon(t)
	src := filepath.Join(t.TempDir(), "proj")
	files := map[string]string{"a.txt": "alpha\n", "sub/b.txt": "beta\n", "sub/deeper/c.sh": "#!/bin/sh\necho c\n"}
	for rel, body := range files {
		p := filepath.Join(src, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(rel, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.txt", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	sb := d.OK("sandbox", "create", "--network", "none")
	_, errOut, code := d.CLI("sandbox", "files", "put", sb, src, "/tmp/proj")
	if code != 0 || !strings.Contains(errOut, "skipping") {
		t.Fatalf("files put DIR: exit %d, stderr %q; want the link reported skipped", code, errOut)
	}
	if out := d.OK("sandbox", "exec", sb, "--", "/bin/sh", "/tmp/proj/sub/deeper/c.sh"); out != "c" {
		t.Errorf("the copied script printed %q", out)
	}
	if out := d.OK("sandbox", "exec", sb, "--", "cat", "/tmp/proj/a.txt", "/tmp/proj/sub/b.txt"); out != "alpha\nbeta" {
		t.Errorf("the copied files hold %q", out)
	}
	if out := d.OK("sandbox", "exec", sb, "--", "stat", "-c", "%a", "/tmp/proj/sub/deeper/c.sh"); out != "755" {
		t.Errorf("the copied script's mode is %s, want 755", out)
	}
	// A single file is still copied as a file, both ways (the list route answers for a file
	// too, so "it lists" does not mean "it is a directory").
	single := filepath.Join(t.TempDir(), "single.txt")
	if err := os.WriteFile(single, []byte("one file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.OK("sandbox", "files", "put", sb, single, "/tmp/single.txt")
	got := filepath.Join(t.TempDir(), "got.txt")
	d.OK("sandbox", "files", "get", sb, "/tmp/single.txt", got)
	if b, err := os.ReadFile(got); err != nil || string(b) != "one file\n" {
		t.Errorf("files get of a single file: %q, %v", b, err)
	}
	// A DEST that exists receives SRC under its name.
	d.OK("sandbox", "files", "put", sb, src, "/tmp")
	if out := d.OK("sandbox", "exec", sb, "--", "cat", "/tmp/proj/a.txt"); out != "alpha" {
		t.Errorf("put into an existing directory: %q", out)
	}

	back := filepath.Join(t.TempDir(), "back")
	d.OK("sandbox", "files", "get", sb, "/tmp/proj", back)
	for rel, body := range files {
		got, err := os.ReadFile(filepath.Join(back, rel))
		if err != nil || string(got) != body {
			t.Errorf("got back %s: %q, %v", rel, got, err)
		}
	}
	if st, err := os.Stat(filepath.Join(back, "sub", "deeper", "c.sh")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("the script's mode after get: %v, %v", st, err)
	}
	existing := t.TempDir()
	d.OK("sandbox", "files", "get", sb, "/tmp/proj/sub", existing)
	if got, err := os.ReadFile(filepath.Join(existing, "sub", "b.txt")); err != nil || string(got) != "beta\n" {
		t.Errorf("get into an existing directory: %q, %v", got, err)
	}
	if msg := d.Fails("sandbox", "files", "get", sb, "/tmp/proj"); !strings.Contains(msg, "is a directory") {
		t.Errorf("get of a directory to stdout: %q", msg)
	}
}
