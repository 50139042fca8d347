package guest

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCappedWriter: writes pass whole until the bound, then one notice, then nothing.
func TestCappedWriter(t *testing.T) {
	var b bytes.Buffer
	c := NewCappedWriter(&b, 100)
	for i := 0; i < 10; i++ {
		if n, err := c.Write([]byte(strings.Repeat("x", 29) + "\n")); n != 30 || err != nil {
			t.Fatalf("write %d = %d, %v; want 30, nil even when dropped", i, n, err)
		}
	}
	want := strings.Repeat(strings.Repeat("x", 29)+"\n", 3) + "zygo-guest: this log reached its bound; further log lines are dropped\n"
	if b.String() != want {
		t.Errorf("wrote %q, want 3 whole lines and the notice", b.String())
	}
}

// TestServiceLogRotates: the file never exceeds its bound, the part before the last rotation
// is in NAME.log.1, and a symlink or FIFO planted at the path gets nothing (and blocks nothing).
func TestServiceLogRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log", "svc.log")
	l := newServiceLog(path, 1000, slog.New(slog.DiscardHandler))
	var all []byte
	for i := 0; i < 50; i++ {
		line := []byte(strconv.Itoa(i) + strings.Repeat("y", 60) + "\n")
		all = append(all, line...)
		l.Write(line)
	}
	l.Write(bytes.Repeat([]byte("z"), 2500)) // one write larger than twice the bound
	all = append(all, bytes.Repeat([]byte("z"), 2500)...)
	cur, _ := os.ReadFile(path)
	old, _ := os.ReadFile(path + ".1")
	if len(cur) > 1000 || len(old) != 1000 {
		t.Fatalf("svc.log %d bytes, svc.log.1 %d; want ≤ 1000 and 1000", len(cur), len(old))
	}
	if got := append(old, cur...); !bytes.HasSuffix(all, got) {
		t.Errorf("the two files are not the end of what was written")
	}

	// A symlink in place of the log: its target is never written.
	target := filepath.Join(dir, "target")
	os.WriteFile(target, nil, 0o600)
	l.mu.Lock()
	l.f.Close()
	l.f = nil
	l.mu.Unlock()
	os.Remove(path)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	l.Write([]byte("through the link?\n"))
	if b, _ := os.ReadFile(target); len(b) != 0 {
		t.Errorf("the agent wrote through a symlink: %q", b)
	}
	// A FIFO with no reader: the write is dropped at once instead of blocking.
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { l.Write([]byte("into a fifo?\n")); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a write to a log replaced by a FIFO blocked")
	}
}

// TestServiceOutputGoesToItsLog: a service's stdout and stderr are one pipe the agent copies to
// ServiceLogDir/NAME.log under the root, bounded; the status names the file.
func TestServiceOutputGoesToItsLog(t *testing.T) {
	s := newTestServices(t)
	s.logMax = 64 << 10
	s.startAll([]Service{{Name: "noisy", Restart: RestartNo, Argv: []string{"/bin/sh", "-c",
		"head -c 1000000 /dev/zero | tr '\\0' A; echo; echo last; exec sleep 1000"}}})
	logPath := filepath.Join(s.root, ServiceLogDir, "noisy.log")
	waitFor(t, "the last line in the log", func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.HasSuffix(string(b), "\nlast\n")
	})
	cur, _ := os.ReadFile(logPath)
	old, _ := os.ReadFile(logPath + ".1")
	if len(cur) > 64<<10 || len(old) != 64<<10 {
		t.Errorf("noisy.log %d bytes, noisy.log.1 %d; want at most the bound", len(cur), len(old))
	}
	st := statusOf(s, "noisy")
	if st.Log != ServiceLogDir+"/noisy.log" {
		t.Errorf("status log %q, want %q", st.Log, ServiceLogDir+"/noisy.log")
	}
	for _, fd := range []string{"1", "2"} {
		link, err := os.Readlink("/proc/" + strconv.Itoa(st.PID) + "/fd/" + fd)
		if err != nil || !strings.HasPrefix(link, "pipe:") {
			t.Errorf("the service's fd %s is %q (%v), want a pipe", fd, link, err)
		}
	}
	// In a service that writes little, the whole output is there, in order: the shell saw a
	// pipe as its fd 1, and stderr goes to the same log.
	s2 := newTestServices(t)
	s2.startAll([]Service{{Name: "quiet", Restart: RestartNo, Argv: []string{"/bin/sh", "-c", "readlink /proc/$$/fd/1; echo to-stderr >&2"}}})
	p2 := filepath.Join(s2.root, ServiceLogDir, "quiet.log")
	waitFor(t, "two lines in quiet.log", func() bool {
		b, _ := os.ReadFile(p2)
		return strings.Count(string(b), "\n") == 2
	})
	if b, _ := os.ReadFile(p2); !strings.HasPrefix(string(b), "pipe:") || !strings.HasSuffix(string(b), "\nto-stderr\n") {
		t.Errorf("quiet.log = %q, want its fd 1 a pipe, then the stderr line", b)
	}
}
