package agentproc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/untrusted"
)

const marker = "zygo-host-marker-7f3a"

// plantAt puts, at name in dir, one thing a hostile request can leave where
// the supervisor expects its own regular file. what names the kind.
func plantAt(t *testing.T, dir, name, what string) {
	t.Helper()
	p := filepath.Join(dir, name)
	var err error
	switch what {
	case "symlink to a host file":
		host := filepath.Join(t.TempDir(), "host-file")
		if err := os.WriteFile(host, []byte(marker+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		err = os.Symlink(host, p)
	case "symlink to /etc/shadow":
		err = os.Symlink("/etc/shadow", p)
	case "fifo":
		err = syscall.Mkfifo(p, 0o600)
	case "hard link":
		host := filepath.Join(dir, "tmp-"+name) // same filesystem, as a hard link must be
		if err := os.WriteFile(host, []byte(marker+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		err = os.Link(host, p)
	case "device":
		err = syscall.Mknod(p, syscall.S_IFCHR|0o600, 1<<8|5) // /dev/zero
	case "directory":
		err = os.Mkdir(p, 0o700)
	case "huge sparse file":
		var f *os.File
		if f, err = os.Create(p); err == nil {
			err = f.Truncate(1 << 40)
			f.Close()
		}
	default:
		t.Fatalf("unknown plant %q", what)
	}
	if err != nil {
		t.Fatalf("planting %s: %v (device nodes need root)", what, err)
	}
}

var plants = []string{"symlink to a host file", "symlink to /etc/shadow", "fifo", "hard link", "device", "directory", "huge sparse file"}

// within runs f, failing the test if it has not returned after a minute (a
// hang, not a timing threshold: a regular read takes microseconds).
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s: blocked", what)
	}
}

func openDir(t *testing.T, dir string) *untrusted.Dir {
	t.Helper()
	d, err := untrusted.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func shadowLines(t *testing.T) []string {
	b, err := os.ReadFile("/etc/shadow")
	if err != nil {
		t.Fatalf("reading /etc/shadow (run as root): %v", err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

func TestReadResultRefusesWhatTheRequestPlanted(t *testing.T) {
	shadow := shadowLines(t)
	for _, what := range plants {
		t.Run(strings.ReplaceAll(what, " ", "_"), func(t *testing.T) {
			dir := t.TempDir()
			plantAt(t, dir, "result.json", what)
			d := openDir(t, dir)
			var rf *resultFile
			var err error
			within(t, what, func() { rf, err = readResult(context.Background(), d, 1<<20) })
			if err == nil {
				t.Fatalf("read a planted %s: %+v", what, rf)
			}
			want := errNotItsResult
			if what == "huge sparse file" {
				want = errdefs.ErrTooLarge
			}
			if !errors.Is(err, want) {
				t.Fatalf("err = %v, want %v", err, want)
			}
			msg := err.Error()
			if strings.Contains(msg, dir) || strings.Contains(msg, marker) {
				t.Fatalf("error names the host path or the file's contents: %q", msg)
			}
			for _, l := range shadow {
				if strings.Contains(msg, l) {
					t.Fatalf("error holds a line of /etc/shadow")
				}
			}
		})
	}
}

func TestReadLinesRefusesWhatTheRequestPlanted(t *testing.T) {
	shadow := shadowLines(t)
	for _, what := range plants {
		t.Run(strings.ReplaceAll(what, " ", "_"), func(t *testing.T) {
			dir := t.TempDir()
			plantAt(t, dir, "stdout", what)
			d := openDir(t, dir)
			var lines []string
			within(t, what, func() { lines = readLines(context.Background(), d, "stdout", nil) })
			joined := strings.Join(lines, "\n")
			if strings.Contains(joined, marker) {
				t.Fatalf("the host file's marker reached the logs")
			}
			for _, l := range shadow {
				if strings.Contains(joined, l) {
					t.Fatalf("a line of /etc/shadow reached the logs")
				}
			}
			if what == "huge sparse file" {
				var kept int
				for _, l := range lines[:len(lines)-1] {
					kept += len(l)
				}
				if kept > maxLogBytes || !strings.Contains(lines[len(lines)-1], "stdout truncated") {
					t.Fatalf("kept %d bytes of a 1 TiB stdout, last line %q", kept, lines[len(lines)-1])
				}
				return
			}
			if len(lines) != 1 || !strings.Contains(lines[0], "stdout is not a regular file") {
				t.Fatalf("lines = %q, want the one note", lines)
			}
		})
	}
}

func TestReadLinesReadsItsOwnOutput(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "stdout"), []byte("one\ntwo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := readLines(context.Background(), openDir(t, dir), "stdout", nil); strings.Join(got, "|") != "one|two" {
		t.Fatalf("lines = %q", got)
	}
	if got := readLines(context.Background(), openDir(t, dir), "stderr", nil); got != nil {
		t.Fatalf("missing stderr: %q", got)
	}
}

// TestRemoveRequestDirLeavesTargetsAlone: the request dir goes, with what was
// planted in it, and nothing a link in it pointed at.
func TestRemoveRequestDirLeavesTargetsAlone(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	keep := filepath.Join(outside, "keep")
	if err := os.WriteFile(keep, []byte(marker), 0o600); err != nil {
		t.Fatal(err)
	}
	z := &Process{reqRoot: root, root: openDir(t, root)}
	d, err := z.newDir()
	if err != nil {
		t.Fatal(err)
	}
	for i, what := range plants {
		plantAt(t, d.host, "p"+string(rune('a'+i)), what)
	}
	if err := os.Symlink(outside, filepath.Join(d.host, "tmp", "out")); err != nil {
		t.Fatal(err)
	}
	within(t, "remove", func() { err = d.remove(context.Background()) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(d.host); !os.IsNotExist(err) {
		t.Fatalf("request dir still there: %v", err)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != marker {
		t.Fatalf("a link's target was touched: %q, %v", b, err)
	}
}
