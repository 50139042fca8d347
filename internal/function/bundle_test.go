package function_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
)

const manifestText = "name = \"hello\"\nruntime = \"python\"\nhandler = \"main:handler\"\n"

// treeFile is one file a test writes into a function directory.
type treeFile struct {
	path string
	mode os.FileMode
	data string
}

// writeTree writes files under dir in the order given.
func writeTree(t *testing.T, dir string, files []treeFile) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil { // WriteFile's mode is masked by the umask
			t.Fatal(err)
		}
	}
}

func pack(t *testing.T, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := function.PackDir(dir, &buf); err != nil {
		t.Fatalf("PackDir(%s): %v", dir, err)
	}
	return buf.Bytes()
}

func packAndRead(t *testing.T, dir string) *function.Unpacked {
	t.Helper()
	u, err := function.ReadBundle(bytes.NewReader(pack(t, dir)))
	if err != nil {
		t.Fatalf("ReadBundle of PackDir(%s): %v", dir, err)
	}
	return u
}

// entry is one tar entry of a hand-made bundle.
type entry struct {
	hdr  tar.Header
	data string
}

func reg(name, data string) entry {
	return entry{tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data))}, data}
}

// tarGz builds a gzip'd tar from entries, exactly as given (no cleaning).
func tarGz(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := e.hdr
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("writing header %q: %v", h.Name, err)
		}
		if _, err := io.WriteString(tw, e.data); err != nil {
			t.Fatalf("writing %q: %v", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestPackReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	files := []treeFile{
		{"zygo.toml", 0o644, manifestText},
		{"main.py", 0o600, "def handler(event, ctx):\n    return event\n"},
		{"lib/pkg/util.py", 0o644, "X = 1\n"},
		{"bin/run.sh", 0o750, "#!/bin/sh\necho hi\n"},
		{"data/empty.txt", 0o644, ""},
		{".git/config", 0o644, "[core]\n"},
		{".env", 0o644, "hidden files other than .git are kept\n"},
	}
	writeTree(t, dir, files)
	if err := os.MkdirAll(filepath.Join(dir, "empty", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	u := packAndRead(t, dir)

	want := map[string]treeFile{}
	for _, f := range files {
		if !strings.HasPrefix(f.path, ".git/") {
			want[f.path] = f
		}
	}
	var paths []string
	for _, f := range u.Files {
		paths = append(paths, f.Path)
		w, ok := want[f.Path]
		if !ok {
			t.Errorf("unexpected file %q in bundle", f.Path)
			continue
		}
		wantMode := int64(0o644)
		if w.mode&0o111 != 0 {
			wantMode = 0o755
		}
		if f.Mode != wantMode {
			t.Errorf("%s: mode %o, want %o (from %o)", f.Path, f.Mode, wantMode, w.mode)
		}
		if string(f.Data) != w.data {
			t.Errorf("%s: data %q, want %q", f.Path, f.Data, w.data)
		}
	}
	if len(u.Files) != len(want) {
		t.Errorf("bundle has %d files %q, want %d", len(u.Files), paths, len(want))
	}
	if !slices.IsSorted(paths) {
		t.Errorf("Files not sorted by path: %q", paths)
	}
	if u.Manifest == nil || u.Manifest.Name != "hello" || u.Manifest.Handler != "main:handler" {
		t.Errorf("Manifest = %+v", u.Manifest)
	}
	if !strings.HasPrefix(u.Hash, "sha256:") || len(u.Hash) != len("sha256:")+64 {
		t.Errorf("Hash = %q, want sha256:<64 hex>", u.Hash)
	}

	// And out to disk again: same tree, read-only files.
	out := filepath.Join(t.TempDir(), "versions", "v1")
	if err := u.WriteTo(out); err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	for _, f := range u.Files {
		p := filepath.Join(out, filepath.FromSlash(f.Path))
		st, err := os.Stat(p)
		if err != nil {
			t.Errorf("after WriteTo: %v", err)
			continue
		}
		if want := os.FileMode(f.Mode & 0o550); st.Mode() != want {
			t.Errorf("%s written with mode %v, want %v", f.Path, st.Mode(), want)
		}
		if got, _ := os.ReadFile(p); string(got) != string(f.Data) {
			t.Errorf("%s written as %q, want %q", f.Path, got, f.Data)
		}
	}
	if _, err := os.Stat(out + ".partial"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("WriteTo left %s.partial behind: %v", out, err)
	}
	// The rewritten directory packs to the same version.
	if again := packAndRead(t, out); again.Hash != u.Hash {
		t.Errorf("hash after WriteTo and PackDir = %s, want %s", again.Hash, u.Hash)
	}
}

func TestBundleHash(t *testing.T) {
	base := []treeFile{
		{"zygo.toml", 0o644, manifestText},
		{"main.py", 0o644, "def handler(e, c):\n    return 1\n"},
		{"lib/a.py", 0o644, "A = 1\n"},
		{"lib/b.py", 0o755, "B = 2\n"},
	}
	hashOf := func(t *testing.T, files []treeFile, mtime time.Time) string {
		t.Helper()
		dir := t.TempDir()
		writeTree(t, dir, files)
		if !mtime.IsZero() {
			filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil {
					err = os.Chtimes(p, mtime, mtime)
				}
				return err
			})
		}
		return packAndRead(t, dir).Hash
	}
	h0 := hashOf(t, base, time.Time{})

	t.Run("same content, other mtimes and creation order", func(t *testing.T) {
		reversed := slices.Clone(base)
		slices.Reverse(reversed)
		if h := hashOf(t, reversed, time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)); h != h0 {
			t.Errorf("hash %s, want %s", h, h0)
		}
	})
	t.Run("same content, other tar order and non-exec modes", func(t *testing.T) {
		var es []entry
		for i := len(base) - 1; i >= 0; i-- {
			e := reg(base[i].path, base[i].data)
			e.hdr.Mode = int64(base[i].mode)
			if base[i].mode == 0o644 {
				e.hdr.Mode = 0o600 // only the exec bit is kept
			}
			e.hdr.ModTime = time.Unix(int64(i)*1000, 0)
			e.hdr.Uname = "someone"
			es = append(es, e)
		}
		u, err := function.ReadBundle(bytes.NewReader(tarGz(t, es...)))
		if err != nil {
			t.Fatal(err)
		}
		if u.Hash != h0 {
			t.Errorf("hash %s, want %s", u.Hash, h0)
		}
	})
	for _, c := range []struct {
		name   string
		change func([]treeFile) []treeFile
	}{
		{"one byte changed", func(f []treeFile) []treeFile { f[2].data = "A = 2\n"; return f }},
		{"exec bit set", func(f []treeFile) []treeFile { f[1].mode = 0o744; return f }},
		{"exec bit cleared", func(f []treeFile) []treeFile { f[3].mode = 0o644; return f }},
		{"file renamed", func(f []treeFile) []treeFile { f[2].path = "lib/c.py"; return f }},
		{"file added", func(f []treeFile) []treeFile { return append(f, treeFile{"lib/__init__.py", 0o644, ""}) }},
		{"byte moved between path and content", func(f []treeFile) []treeFile {
			f[2].path, f[2].data = "lib/a.p", "yA = 1\n"
			return f
		}},
		{"one file's content spells the next file's entry", func(f []treeFile) []treeFile {
			// A hash over path, mode and content simply concatenated would
			// not tell these apart.
			f[2].data += f[3].path + "755" + f[3].data
			return f[:3]
		}},
		{"byte moved between two files", func(f []treeFile) []treeFile {
			f[2].data, f[3].data = "A = 1\nB", " = 2\n"
			return f
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if h := hashOf(t, c.change(slices.Clone(base)), time.Time{}); h == h0 {
				t.Errorf("hash unchanged: %s", h)
			}
		})
	}
}

func TestPackDirRefusesLinksAndSpecialFiles(t *testing.T) {
	for _, c := range []struct {
		name string
		make func(dir string) error
	}{
		{"symlink to a file", func(dir string) error { return os.Symlink("/etc/passwd", filepath.Join(dir, "lib", "bad")) }},
		{"symlink inside the dir", func(dir string) error { return os.Symlink("../main.py", filepath.Join(dir, "lib", "bad")) }},
		{"symlink to a directory", func(dir string) error { return os.Symlink("/etc", filepath.Join(dir, "lib", "bad")) }},
		{"fifo", func(dir string) error { return syscall.Mkfifo(filepath.Join(dir, "lib", "bad"), 0o644) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, []treeFile{{"zygo.toml", 0o644, manifestText}, {"main.py", 0o644, "x = 1\n"}, {"lib/ok.py", 0o644, ""}})
			if err := c.make(dir); err != nil {
				t.Fatal(err)
			}
			err := function.PackDir(dir, io.Discard)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("PackDir = %v, want ErrInvalidArgument", err)
			}
			if !strings.Contains(err.Error(), filepath.Join("lib", "bad")) {
				t.Errorf("error %q does not name lib/bad", err)
			}
		})
	}
}

func TestReadBundleRejects(t *testing.T) {
	manifest := reg("zygo.toml", manifestText)
	withType := func(name string, typ byte) entry {
		return entry{tar.Header{Typeflag: typ, Name: name, Linkname: "zygo.toml", Mode: 0o644}, ""}
	}
	for _, c := range []struct {
		name   string
		bundle []byte
		want   string
	}{
		{"absolute path", tarGz(t, manifest, reg("/etc/cron.d/x", "x")), `unsafe path "/etc/cron.d/x"`},
		{"dot-dot", tarGz(t, manifest, reg("../x.py", "x")), `unsafe path "../x.py"`},
		{"dot-dot inside", tarGz(t, manifest, reg("lib/../../x.py", "x")), `unsafe path "lib/../../x.py"`},
		{"bare dot-dot", tarGz(t, manifest, withType("..", tar.TypeDir)), `unsafe path ".."`},
		{"absolute dir", tarGz(t, manifest, withType("/tmp/", tar.TypeDir)), `unsafe path "/tmp/"`},
		{"duplicate", tarGz(t, manifest, reg("main.py", "a"), reg("main.py", "b")), `"main.py" twice`},
		{"duplicate after cleaning", tarGz(t, manifest, reg("lib/main.py", "a"), reg("lib/./x/../main.py", "b")), `"lib/main.py" twice`},
		{"duplicate manifest", tarGz(t, manifest, manifest), `"zygo.toml" twice`},
		{"symlink", tarGz(t, manifest, withType("link", tar.TypeSymlink)), `"link" is not a regular file`},
		{"hard link", tarGz(t, manifest, withType("hard", tar.TypeLink)), `"hard" is not a regular file`},
		{"char device", tarGz(t, manifest, withType("null", tar.TypeChar)), `"null" is not a regular file`},
		{"block device", tarGz(t, manifest, withType("sda", tar.TypeBlock)), `"sda" is not a regular file`},
		{"fifo", tarGz(t, manifest, withType("fifo", tar.TypeFifo)), `"fifo" is not a regular file`},
		{"no manifest", tarGz(t, reg("main.py", "x")), "no zygo.toml"},
		{"manifest only in a subdir", tarGz(t, reg("sub/zygo.toml", manifestText)), "no zygo.toml"},
		{"empty archive", tarGz(t), "no zygo.toml"},
		{"bad manifest", tarGz(t, reg("zygo.toml", manifestText+"[limits]\nmemory_mib = 1\n")), "limits.memory_mib"},
		{"not gzip", []byte("PK\x03\x04 this is a zip"), "not gzip"},
		{"gzip of garbage", gzipOf(t, bytes.Repeat([]byte("garbage!"), 200)), "reading bundle"},
		{"truncated file data", truncatedFile(t), `reading "main.py"`},
		{"file, then a file below it", tarGz(t, manifest, reg("lib", "x"), reg("lib/a.py", "y")), `"lib" is both a file and a directory`},
		{"file below, then the file", tarGz(t, manifest, reg("lib/a.py", "y"), reg("lib", "x")), `"lib" is both a file and a directory`},
		{"directory entry and a file", tarGz(t, manifest, withType("lib/", tar.TypeDir), reg("lib", "x")), `"lib" is both a file and a directory`},
		{"over-long path", tarGz(t, manifest, reg(strings.Repeat("d/", function.MaxPathBytes/2)+"x.py", "x")), "over the limit of 1024"},
		{"over-long name", tarGz(t, manifest, reg(strings.Repeat("n", function.MaxNameBytes+1), "x")), "a name is 256 bytes, over the limit of 255"},
		{"python_path not in the bundle", tarGz(t, reg("zygo.toml", pythonPathManifest), reg("main.py", "x")),
			`python_path[0]: "vendor" is not a directory of the bundle`},
		{"python_path a file", tarGz(t, reg("zygo.toml", pythonPathManifest), reg("vendor", "x")),
			`python_path[0]: "vendor" is not a directory of the bundle`},
	} {
		t.Run(c.name, func(t *testing.T) {
			u, err := function.ReadBundle(bytes.NewReader(c.bundle))
			if err == nil {
				t.Fatalf("ReadBundle accepted the bundle: %+v", u.Files)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error %q does not wrap ErrInvalidArgument", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
		})
	}
}

// pythonPathManifest ships its dependencies in vendor/.
const pythonPathManifest = "name = \"hello\"\nruntime = \"python\"\nhandler = \"main:handler\"\npython_path = [\"vendor\"]\n"

// TestReadBundlePythonPath: a python_path entry is a directory of the bundle, as a directory
// entry or as the parent of a file.
func TestReadBundlePythonPath(t *testing.T) {
	for _, b := range [][]byte{
		tarGz(t, reg("zygo.toml", pythonPathManifest), reg("vendor/dep/__init__.py", "x")),
		tarGz(t, reg("zygo.toml", pythonPathManifest), entry{tar.Header{Typeflag: tar.TypeDir, Name: "vendor/", Mode: 0o755}, ""}),
	} {
		u, err := function.ReadBundle(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if got := u.Manifest.PythonPath; len(got) != 1 || got[0] != "vendor" {
			t.Errorf("python_path = %q, want [vendor]", got)
		}
	}
}

func gzipOf(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	gz.Write(b)
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// truncatedFile is a bundle whose main.py header promises 1000 bytes and
// whose gzip stream ends after 10 of them.
func truncatedFile(t *testing.T) []byte {
	t.Helper()
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "zygo.toml", Mode: 0o644, Size: int64(len(manifestText))})
	io.WriteString(tw, manifestText)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "main.py", Mode: 0o644, Size: 1000})
	io.WriteString(tw, "0123456789")
	tw.Flush() // fails (short entry): the archive is cut here on purpose
	return gzipOf(t, raw.Bytes())
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// streamBundle writes a gzip'd tar to a pipe from a goroutine: the header
// hdr, then hdr.Size bytes from data. The bundle is never held in memory.
// The returned reader counts what the consumer took; stop ends the writer.
func streamBundle(level int, pre []entry, hdr tar.Header, data io.Reader) (r *countingReader, stop func()) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		gz, _ := gzip.NewWriterLevel(pw, level)
		tw := tar.NewWriter(gz)
		for _, e := range pre {
			h := e.hdr
			tw.WriteHeader(&h)
			io.WriteString(tw, e.data)
		}
		if err := tw.WriteHeader(&hdr); err != nil {
			pw.CloseWithError(err)
			return
		}
		if _, err := io.CopyN(tw, data, hdr.Size); err != nil {
			pw.CloseWithError(err)
			return
		}
		tw.Close()
		pw.CloseWithError(gz.Close())
	}()
	return &countingReader{r: pr}, func() {
		pr.CloseWithError(errors.New("test finished"))
		<-done
	}
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestReadBundleTooLarge(t *testing.T) {
	manifest := reg("zygo.toml", manifestText)
	t.Run("header claims a huge size", func(t *testing.T) {
		// The header alone: the archive ends right after it, so a reader that
		// trusted the size and started reading would fail differently.
		var raw bytes.Buffer
		tw := tar.NewWriter(&raw)
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "zygo.toml", Mode: 0o644, Size: int64(len(manifestText))})
		io.WriteString(tw, manifestText)
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "huge.bin", Mode: 0o644, Size: 1 << 40})
		_, err := function.ReadBundle(bytes.NewReader(gzipOf(t, raw.Bytes())))
		if !errors.Is(err, errdefs.ErrTooLarge) {
			t.Fatalf("ReadBundle = %v, want ErrTooLarge", err)
		}
	})
	t.Run("gzip bomb", func(t *testing.T) {
		// MaxUnpackedBytes+1 real zero bytes: about 256 KiB compressed.
		r, stop := streamBundle(gzip.BestSpeed, []entry{manifest},
			tar.Header{Typeflag: tar.TypeReg, Name: "bomb.bin", Mode: 0o644, Size: function.MaxUnpackedBytes + 1}, zeros{})
		defer stop()
		_, err := function.ReadBundle(r)
		if !errors.Is(err, errdefs.ErrTooLarge) {
			t.Fatalf("ReadBundle = %v, want ErrTooLarge", err)
		}
		if r.n > 1<<20 {
			t.Errorf("ReadBundle consumed %d compressed bytes before refusing; it should stop at the header", r.n)
		}
	})
	t.Run("sum of files", func(t *testing.T) {
		// Each file alone is under the limit; together they are over it.
		oneMiB := strings.Repeat("x", 1<<20)
		r, stop := streamBundle(gzip.BestSpeed, []entry{manifest, reg("a.bin", oneMiB)},
			tar.Header{Typeflag: tar.TypeReg, Name: "b.bin", Mode: 0o644, Size: function.MaxUnpackedBytes - 1<<20}, zeros{})
		defer stop()
		_, err := function.ReadBundle(r)
		if !errors.Is(err, errdefs.ErrTooLarge) {
			t.Fatalf("ReadBundle = %v, want ErrTooLarge", err)
		}
	})
	t.Run("too many files", func(t *testing.T) {
		es := []entry{manifest}
		for i := range function.MaxBundleFiles {
			es = append(es, reg("f/"+strconv.Itoa(i), ""))
		}
		if _, err := function.ReadBundle(bytes.NewReader(tarGz(t, es[:function.MaxBundleFiles]...))); err != nil {
			t.Fatalf("ReadBundle of exactly MaxBundleFiles files: %v", err)
		}
		_, err := function.ReadBundle(bytes.NewReader(tarGz(t, es...)))
		if !errors.Is(err, errdefs.ErrTooLarge) {
			t.Fatalf("ReadBundle of %d files = %v, want ErrTooLarge", len(es), err)
		}
	})
	t.Run("compressed stream over MaxBundleBytes", func(t *testing.T) {
		// Incompressible data, so that the compressed stream passes
		// MaxBundleBytes while the unpacked size is still within its limit.
		rnd := rand.NewChaCha8([32]byte{1}) // an io.Reader
		r, stop := streamBundle(gzip.NoCompression, []entry{manifest},
			tar.Header{Typeflag: tar.TypeReg, Name: "noise.bin", Mode: 0o644, Size: function.MaxBundleBytes + 1<<20}, rnd)
		defer stop()
		_, err := function.ReadBundle(r)
		if !errors.Is(err, errdefs.ErrTooLarge) {
			t.Fatalf("ReadBundle = %v, want ErrTooLarge", err)
		}
		if r.n > function.MaxBundleBytes+1 {
			t.Errorf("ReadBundle consumed %d compressed bytes, more than MaxBundleBytes+1", r.n)
		}
	})
}

func TestWriteTo(t *testing.T) {
	files := []function.File{
		{Path: "zygo.toml", Mode: 0o644, Data: []byte(manifestText)},
		{Path: "a/b/c.py", Mode: 0o644, Data: []byte("c")},
		{Path: "run.sh", Mode: 0o755, Data: []byte("#!/bin/sh\n")},
	}

	t.Run("read-only files", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "v")
		if err := (&function.Unpacked{Files: files}).WriteTo(dir); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			st, err := os.Stat(filepath.Join(dir, f.Path))
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm()&0o222 != 0 {
				t.Errorf("%s has mode %v: writable", f.Path, st.Mode())
			}
			if exec := st.Mode().Perm()&0o111 != 0; exec != (f.Mode == 0o755) {
				t.Errorf("%s has mode %v, from bundle mode %o", f.Path, st.Mode(), f.Mode)
			}
		}
	})

	t.Run("stale partial directory is replaced", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "v")
		writeTree(t, dir+".partial", []treeFile{{"junk.py", 0o644, "from an earlier crash"}})
		if err := (&function.Unpacked{Files: files}).WriteTo(dir); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "junk.py")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("junk from the stale .partial directory survived: %v", err)
		}
	})

	t.Run("cleans up on error", func(t *testing.T) {
		// "a" is a file, so "a/b" cannot be created under it.
		bad := []function.File{{Path: "a", Mode: 0o644, Data: []byte("x")}, {Path: "a/b", Mode: 0o644, Data: []byte("y")}}
		parent := t.TempDir()
		dir := filepath.Join(parent, "v")
		if err := (&function.Unpacked{Files: bad}).WriteTo(dir); err == nil {
			t.Fatal("WriteTo succeeded with a file under a file")
		}
		if entries, _ := os.ReadDir(parent); len(entries) != 0 {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Errorf("WriteTo left %q behind in %s", names, parent)
		}
	})

	t.Run("existing version is not overwritten", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "v")
		writeTree(t, dir, []treeFile{{"keep.py", 0o644, "old"}})
		if err := (&function.Unpacked{Files: files}).WriteTo(dir); err == nil {
			t.Fatal("WriteTo over a non-empty existing directory succeeded")
		}
		if got, err := os.ReadFile(filepath.Join(dir, "keep.py")); err != nil || string(got) != "old" {
			t.Errorf("existing directory changed: %q, %v", got, err)
		}
		if _, err := os.Stat(dir + ".partial"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("WriteTo left %s.partial behind: %v", dir, err)
		}
	})
}

// TestReadBundleAcceptsDotEntry: `tar -czf - .` writes a "./" directory
// entry and "./name" paths; such a bundle is accepted.
func TestReadBundleAcceptsDotEntry(t *testing.T) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755})
	manifest := []byte("name = \"dot\"\nruntime = \"python\"\nhandler = \"main:handler\"\n")
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "./zygo.toml", Mode: 0o644, Size: int64(len(manifest))})
	tw.Write(manifest)
	tw.Close()
	gz.Close()
	u, err := function.ReadBundle(&buf)
	if err != nil {
		t.Fatalf("ReadBundle of a tar with ./ entries: %v", err)
	}
	if len(u.Files) != 1 || u.Files[0].Path != "zygo.toml" || u.Manifest.Name != "dot" {
		t.Fatalf("files %+v", u.Files)
	}
}
