package zygo

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// packedNames returns the entries PackDir writes for dir, sorted.
func packedNames(t *testing.T, dir string) []string {
	t.Helper()
	var buf bytes.Buffer
	if err := PackDir(dir, &buf); err != nil {
		t.Fatal(err)
	}
	gz, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	slices.Sort(names)
	return names
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPackDirDefaultIgnores: __pycache__, .venv and node_modules of the host stay out of the
// bundle unless .zygoignore takes them back.
func TestPackDirDefaultIgnores(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"zygo.toml": "x", "main.py": "x", "__pycache__/main.cpython-311.pyc": "x",
		"lib/__pycache__/a.pyc": "x", "lib/a.py": "x", ".venv/bin/python": "x",
		"node_modules/dep/index.js": "x", ".git/HEAD": "x",
	})
	want := []string{"lib/", "lib/a.py", "main.py", "zygo.toml"}
	if got := packedNames(t, dir); !slices.Equal(got, want) {
		t.Errorf("packed %q, want %q", got, want)
	}
	writeFiles(t, dir, map[string]string{IgnoreFile: "# ship the Node packages\n!node_modules/\n"})
	want = []string{".zygoignore", "lib/", "lib/a.py", "main.py", "node_modules/", "node_modules/dep/", "node_modules/dep/index.js", "zygo.toml"}
	if got := packedNames(t, dir); !slices.Equal(got, want) {
		t.Errorf("with !node_modules/: packed %q, want %q", got, want)
	}
}

// TestPackDirZygoignore: the subset of gitignore's syntax IgnoreFile documents.
func TestPackDirZygoignore(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"zygo.toml": "x", "main.py": "x", "notes.md": "x", "docs/a.md": "x", "docs/deep/b.md": "x",
		"docs/keep.txt": "x", "build/out.o": "x", "src/build/gen.py": "x", "data/big.bin": "x",
		"data/small.bin": "x", "tests/test_a.py": "x", "lib/tests": "x", "#hash.py": "x",
	})
	writeFiles(t, dir, map[string]string{IgnoreFile: strings.Join([]string{
		"# comments and blank lines are skipped", "",
		"*.md        ",  // trailing spaces trimmed; any depth
		"!docs/**/b.md", // ** spans directories; ! takes back
		"/build",        // anchored: not src/build
		"data/*.bin",
		"!data/small.bin",
		"tests/",    // directories only: not the file lib/tests
		`\#hash.py`, // escaped #
		"zygo.toml", // never left out
	}, "\n")})
	want := []string{".zygoignore", "data/", "data/small.bin", "docs/", "docs/deep/", "docs/deep/b.md",
		"docs/keep.txt", "lib/", "lib/tests", "main.py", "src/", "src/build/", "src/build/gen.py", "zygo.toml"}
	slices.Sort(want)
	if got := packedNames(t, dir); !slices.Equal(got, want) {
		t.Errorf("packed\n%q\nwant\n%q", got, want)
	}
}

// TestPackDirZygoignoreErrors: a pattern path.Match cannot use is an error naming the line;
// a link that is left out is not an error.
func TestPackDirZygoignoreErrors(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"zygo.toml": "x", IgnoreFile: "ok\n[z-\n"})
	err := PackDir(dir, io.Discard)
	if err == nil || !strings.Contains(err.Error(), ".zygoignore line 2") {
		t.Errorf("bad pattern: %v, want an error naming .zygoignore line 2", err)
	}
	writeFiles(t, dir, map[string]string{IgnoreFile: "venv-link\n"})
	if err := os.Symlink("/usr", filepath.Join(dir, "venv-link")); err != nil {
		t.Fatal(err)
	}
	if err := PackDir(dir, io.Discard); err != nil {
		t.Errorf("an ignored link: %v", err)
	}
}
