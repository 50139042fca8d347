package function

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/redact"
)

// TestRedactResult: the error of a request (message, type, traceback) is
// scrubbed; its output is redacted where it is read (internal/agentproc).
func TestRedactResult(t *testing.T) {
	r := redact.New(map[string][]byte{"DB_PASSWORD": []byte("hunter2hunter2")})
	res := &agentproc.Result{
		Value: []byte(`{"ok":true}`),
		Error: &agentproc.HandlerError{
			Type:      "Err_hunter2hunter2",
			Message:   "login failed for password hunter2hunter2",
			Traceback: "Traceback:\n  File main.py, in handler\n    login('hunter2hunter2')\n",
		},
	}
	redactResult(res, r)
	for _, s := range []string{res.Error.Type, res.Error.Message, res.Error.Traceback} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("secret survived redaction: %q", s)
		}
	}
	if !strings.Contains(res.Error.Traceback, "login('[redacted:DB_PASSWORD]')") {
		t.Errorf("Traceback = %q", res.Error.Traceback)
	}
	// No values, no error: nothing changes and nothing panics.
	clean := &agentproc.Result{Error: &agentproc.HandlerError{Message: "hunter2hunter2"}}
	redactResult(clean, nil)
	redactResult(&agentproc.Result{}, r)
	if clean.Error.Message != "hunter2hunter2" {
		t.Errorf("redactResult without values changed %q", clean.Error.Message)
	}
}

// secretDir returns the names in dir.
func secretDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func checkSecretFile(t *testing.T, dir, name, want string) {
	t.Helper()
	p := filepath.Join(dir, name)
	st, err := os.Stat(p)
	if err != nil {
		t.Fatalf("secret file %s: %v", name, err)
	}
	if st.Mode() != 0o400 {
		t.Errorf("secret file %s has mode %v, want -r--------", name, st.Mode())
	}
	if got, _ := os.ReadFile(p); string(got) != want {
		t.Errorf("secret file %s = %q, want %q", name, got, want)
	}
}

func TestSecretFilesRefcount(t *testing.T) {
	dir := t.TempDir()
	s := &secretFiles{dir: dir}

	if err := s.acquire(map[string][]byte{"A": []byte("one"), "B": []byte("two")}); err != nil {
		t.Fatal(err)
	}
	checkSecretFile(t, dir, "A", "one")
	checkSecretFile(t, dir, "B", "two")
	if names := secretDir(t, dir); !slices.Equal(names, []string{"A", "B"}) {
		t.Errorf("dir holds %q, want [A B] (no temporary files)", names)
	}

	// A second request while the first runs; A was rotated in between.
	if err := s.acquire(map[string][]byte{"A": []byte("one, rotated"), "B": []byte("two")}); err != nil {
		t.Fatal(err)
	}
	checkSecretFile(t, dir, "A", "one, rotated")

	s.release()
	if names := secretDir(t, dir); !slices.Equal(names, []string{"A", "B"}) {
		t.Fatalf("after the first of two releases the dir holds %q, want [A B]", names)
	}
	checkSecretFile(t, dir, "A", "one, rotated")

	s.release()
	if names := secretDir(t, dir); len(names) != 0 {
		t.Fatalf("after the last release the dir holds %q, want nothing", names)
	}

	// And again from zero.
	if err := s.acquire(map[string][]byte{"C": []byte("three")}); err != nil {
		t.Fatal(err)
	}
	checkSecretFile(t, dir, "C", "three")
	s.release()
	if names := secretDir(t, dir); len(names) != 0 {
		t.Fatalf("after the last release the dir holds %q, want nothing", names)
	}
}

func TestSecretFilesAcquireFailure(t *testing.T) {
	t.Run("missing dir", func(t *testing.T) {
		s := &secretFiles{dir: filepath.Join(t.TempDir(), "missing")}
		if err := s.acquire(map[string][]byte{"A": []byte("one")}); err == nil {
			t.Fatal("acquire into a missing directory succeeded")
		}
		if s.users != 0 {
			t.Errorf("a failed acquire counted a user: users = %d", s.users)
		}
	})
	t.Run("partial write is undone", func(t *testing.T) {
		// Writing BAD fails (its temporary name is a non-empty directory);
		// whatever was written before it must not stay behind, since no
		// request holds the files and nobody will release them.
		for i := range 20 {
			dir := t.TempDir()
			obstacle := filepath.Join(dir, ".BAD.new")
			if err := os.MkdirAll(filepath.Join(obstacle, "x"), 0o755); err != nil {
				t.Fatal(err)
			}
			s := &secretFiles{dir: dir}
			values := map[string][]byte{"A": []byte("1"), "B": []byte("2"), "C": []byte("3"), "D": []byte("4"), "BAD": []byte("5")}
			if err := s.acquire(values); err == nil || !strings.Contains(err.Error(), "BAD") {
				t.Fatalf("acquire = %v, want an error naming BAD", err)
			}
			if names := secretDir(t, dir); !slices.Equal(names, []string{".BAD.new"}) {
				t.Fatalf("attempt %d: after a failed acquire with no users the dir holds %q", i, names)
			}
		}
	})
	t.Run("failure with a user keeps that user's files", func(t *testing.T) {
		dir := t.TempDir()
		s := &secretFiles{dir: dir}
		if err := s.acquire(map[string][]byte{"A": []byte("1")}); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, ".BAD.new", "x"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := s.acquire(map[string][]byte{"A": []byte("1"), "BAD": []byte("5")}); err == nil {
			t.Fatal("acquire succeeded")
		}
		checkSecretFile(t, dir, "A", "1")
		if s.users != 1 {
			t.Errorf("users = %d, want 1", s.users)
		}
	})
}

func TestSecretFilesOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test chowns files to another uid: run it as root (sudo go test ./internal/function)")
	}
	dir := t.TempDir()
	s := &secretFiles{dir: dir, uid: 65534}
	if err := s.acquire(map[string][]byte{"A": []byte("one")}); err != nil {
		t.Fatal(err)
	}
	defer s.release()
	st, err := os.Stat(filepath.Join(dir, "A"))
	if err != nil {
		t.Fatal(err)
	}
	if uid, gid := fileOwner(st); uid != 65534 || gid != 65534 {
		t.Errorf("secret file owned by %d:%d, want 65534:65534", uid, gid)
	}
}

// Rotation replaces a file whole: a reader sees the old value or the new
// one, never a mix or a truncated file.
func TestSecretFilesRotationIsAtomic(t *testing.T) {
	dir := t.TempDir()
	s := &secretFiles{dir: dir}
	const size = 256 << 10
	vals := [][]byte{bytes.Repeat([]byte("a"), size), bytes.Repeat([]byte("b"), size)}
	if err := s.acquire(map[string][]byte{"K": vals[0]}); err != nil { // held throughout
		t.Fatal(err)
	}
	defer s.release()

	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			if err := s.acquire(map[string][]byte{"K": vals[i%2]}); err != nil {
				t.Error(err)
				return
			}
			s.release()
		}
	}()
	p := filepath.Join(dir, "K")
	for range 500 {
		got, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("reading during rotation: %v", err)
			break
		}
		if !bytes.Equal(got, vals[0]) && !bytes.Equal(got, vals[1]) {
			t.Errorf("reader saw %d bytes that are neither value (first %q)", len(got), got[:min(len(got), 8)])
			break
		}
	}
	stop.Store(true)
	wg.Wait()
}

func fileOwner(st os.FileInfo) (uid, gid uint32) {
	sys := st.Sys().(*syscall.Stat_t)
	return sys.Uid, sys.Gid
}

// TestSecretFilesNeverFollowAPlantedLink: the secrets dir is owned by the
// sandbox uid. Links left at a secret's name and at its temporary name are
// replaced and removed; the host files they point at are never written.
func TestSecretFilesNeverFollowAPlantedLink(t *testing.T) {
	dir := t.TempDir()
	host := t.TempDir()
	victims := map[string]string{".A.new": filepath.Join(host, "tmp-victim"), "A": filepath.Join(host, "victim")}
	for name, target := range victims {
		if err := os.WriteFile(target, []byte("host file"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	s := &secretFiles{dir: dir}
	if err := s.acquire(map[string][]byte{"A": []byte("the secret")}); err != nil {
		t.Fatal(err)
	}
	checkSecretFile(t, dir, "A", "the secret")
	s.release()
	if names := secretDir(t, dir); len(names) != 0 {
		t.Fatalf("after the last release the dir holds %q", names)
	}
	for _, target := range victims {
		if b, err := os.ReadFile(target); err != nil || string(b) != "host file" {
			t.Fatalf("%s was written through a link: %q, %v", target, b, err)
		}
	}
}
