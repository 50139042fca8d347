package secret_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/secret"
	"github.com/zygo-run/zygo/internal/store"
)

// env is a state directory with a store and a secret store on it.
type env struct {
	dir     string
	db      *store.Store
	secrets *secret.Store
}

func (e *env) dbPath() string  { return filepath.Join(e.dir, "zygo.db") }
func (e *env) keyPath() string { return filepath.Join(e.dir, "secret.key") }

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{dir: t.TempDir()}
	db, err := store.Open(context.Background(), e.dbPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	e.db = db
	e.secrets, err = secret.Open(context.Background(), db.DB(), e.keyPath())
	if err != nil {
		t.Fatalf("secret.Open: %v", err)
	}
	return e
}

func TestSetValueListRemove(t *testing.T) {
	ctx := context.Background()
	s := newEnv(t).secrets
	if ms, err := s.List(ctx); err != nil || ms == nil || len(ms) != 0 {
		t.Fatalf("List on an empty store = %#v, %v; want an empty, non-nil list", ms, err)
	}
	values := map[string]string{"ZED": "z-value", "API_KEY": "sk-123\n", "_db": "\x00binary\xff"}
	for n, v := range values {
		if err := s.Set(ctx, n, []byte(v)); err != nil {
			t.Fatalf("Set(%s): %v", n, err)
		}
	}
	for n, v := range values {
		got, err := s.Value(ctx, n)
		if err != nil || string(got) != v {
			t.Errorf("Value(%s) = %q, %v; want %q", n, got, err, v)
		}
	}
	ms, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range ms {
		names = append(names, m.Name)
		if time.Since(m.UpdatedAt) > time.Minute || m.UpdatedAt.After(time.Now()) {
			t.Errorf("%s updated at %v", m.Name, m.UpdatedAt)
		}
	}
	if !slices.Equal(names, []string{"API_KEY", "ZED", "_db"}) {
		t.Errorf("List names = %q, want sorted [API_KEY ZED _db]", names)
	}

	missing, err := s.Missing(ctx, []string{"API_KEY", "NOPE", "ZED", "ALSO_NOPE"})
	if err != nil || !slices.Equal(missing, []string{"NOPE", "ALSO_NOPE"}) {
		t.Errorf("Missing = %q, %v; want [NOPE ALSO_NOPE]", missing, err)
	}

	if err := s.Remove(ctx, "ZED"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := s.Value(ctx, "ZED"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Value after Remove = %v, want ErrNotFound", err)
	}
	if err := s.Remove(ctx, "ZED"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second Remove = %v, want ErrNotFound", err)
	}
	if ms, _ := s.List(ctx); len(ms) != 2 {
		t.Errorf("List after Remove has %d entries, want 2", len(ms))
	}
}

func TestRotation(t *testing.T) {
	ctx := context.Background()
	s := newEnv(t).secrets
	if err := s.Set(ctx, "TOKEN", []byte("old-token")); err != nil {
		t.Fatal(err)
	}
	before, _ := s.List(ctx)
	time.Sleep(2 * time.Millisecond)
	if err := s.Set(ctx, "TOKEN", []byte("new-token-longer")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Value(ctx, "TOKEN"); err != nil || string(got) != "new-token-longer" {
		t.Errorf("Value after rotation = %q, %v", got, err)
	}
	after, _ := s.List(ctx)
	if len(after) != 1 || !after[0].UpdatedAt.After(before[0].UpdatedAt) {
		t.Errorf("List after rotation = %+v (before %+v): want one entry with a later time", after, before)
	}
}

func TestValidName(t *testing.T) {
	for _, n := range []string{"A", "_", "api_key", "API_KEY_2", "a" + strings.Repeat("B", 127)} {
		if err := secret.ValidName(n); err != nil {
			t.Errorf("ValidName(%q) = %v", n, err)
		}
	}
	ctx := context.Background()
	s := newEnv(t).secrets
	for _, n := range []string{"", "1KEY", "API-KEY", "API KEY", "a.b", "../x", "a/b", ".hidden", "é", "a" + strings.Repeat("B", 128)} {
		if err := secret.ValidName(n); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ValidName(%q) = %v, want ErrInvalidArgument", n, err)
		}
		if err := s.Set(ctx, n, []byte("v")); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Set(%q) = %v, want ErrInvalidArgument", n, err)
		}
	}
	if ms, _ := s.List(ctx); len(ms) != 0 {
		t.Errorf("invalid names were stored: %+v", ms)
	}
}

func TestValueSize(t *testing.T) {
	ctx := context.Background()
	s := newEnv(t).secrets
	if err := s.Set(ctx, "EMPTY", nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Set of an empty value = %v, want ErrInvalidArgument", err)
	}
	if err := s.Set(ctx, "EMPTY", []byte{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Set of an empty value = %v, want ErrInvalidArgument", err)
	}
	if err := s.Set(ctx, "BIG", make([]byte, secret.MaxValueBytes+1)); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("Set of MaxValueBytes+1 = %v, want ErrTooLarge", err)
	}
	if ms, _ := s.List(ctx); len(ms) != 0 {
		t.Errorf("refused values were stored: %+v", ms)
	}
	max := bytes.Repeat([]byte{0xA5}, secret.MaxValueBytes)
	if err := s.Set(ctx, "MAX", max); err != nil {
		t.Fatalf("Set of exactly MaxValueBytes: %v", err)
	}
	if got, err := s.Value(ctx, "MAX"); err != nil || !bytes.Equal(got, max) {
		t.Errorf("Value(MAX): %d bytes, %v", len(got), err)
	}
}

func TestKeyFile(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	st, err := os.Stat(e.keyPath())
	if err != nil {
		t.Fatalf("key file not created: %v", err)
	}
	if st.Mode() != 0o600 || st.Size() != 32 {
		t.Errorf("key file: mode %v, %d bytes; want -rw------- and 32 bytes", st.Mode(), st.Size())
	}
	key, _ := os.ReadFile(e.keyPath())
	if bytes.Equal(key, make([]byte, 32)) {
		t.Error("key file is all zeros")
	}
	if err := e.secrets.Set(ctx, "A", []byte("value-a")); err != nil {
		t.Fatal(err)
	}

	// Opening again loads the same key: the value still decrypts, and the
	// key file is not rewritten.
	again, err := secret.Open(ctx, e.db.DB(), e.keyPath())
	if err != nil {
		t.Fatalf("reopening with the existing key file: %v", err)
	}
	if got, err := again.Value(ctx, "A"); err != nil || string(got) != "value-a" {
		t.Errorf("Value with the reloaded key = %q, %v", got, err)
	}
	if key2, _ := os.ReadFile(e.keyPath()); !bytes.Equal(key, key2) {
		t.Error("reopening rewrote the key file")
	}

	// Another state dir gets another key.
	other := newEnv(t)
	if key3, _ := os.ReadFile(other.keyPath()); bytes.Equal(key, key3) {
		t.Error("two state dirs got the same key")
	}
}

func TestKeyFileRefused(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		mode os.FileMode
		size int
		want string
	}{
		{"world readable", 0o644, 32, "mode 644"},
		{"group readable", 0o640, 32, "mode 640"},
		{"group writable", 0o620, 32, "mode 620"},
		{"short", 0o600, 31, "32 bytes"},
		{"empty", 0o600, 0, "32 bytes"},
		{"long", 0o600, 33, "32 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			key := filepath.Join(t.TempDir(), "secret.key")
			if err := os.WriteFile(key, bytes.Repeat([]byte{7}, c.size), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(key, c.mode); err != nil {
				t.Fatal(err)
			}
			_, err := secret.Open(ctx, e.db.DB(), key)
			if err == nil {
				t.Fatalf("Open accepted a key file of mode %v and %d bytes", c.mode, c.size)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
		})
	}
}

func TestWrongKeyCannotDecrypt(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	const value = "correct-horse-battery-staple"
	if err := e.secrets.Set(ctx, "PASS", []byte(value)); err != nil {
		t.Fatal(err)
	}
	// The same database with a fresh key file: a state dir whose
	// secret.key was replaced.
	wrong, err := secret.Open(ctx, e.db.DB(), filepath.Join(t.TempDir(), "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := wrong.Value(ctx, "PASS")
	if err == nil {
		t.Fatalf("Value with the wrong key = %q, want an error", got)
	}
	if errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("wrong key reported as not found: %v", err)
	}
	if strings.Contains(err.Error(), value) || strings.Contains(err.Error(), "horse") {
		t.Errorf("error leaks the value: %v", err)
	}
	if !strings.Contains(err.Error(), "PASS") {
		t.Errorf("error %q does not name the secret", err)
	}
	if got != nil {
		t.Errorf("Value returned bytes with its error: %q", got)
	}
}

func TestDatabaseNeverHoldsPlaintext(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	values := map[string][]byte{
		"ONE":  []byte("plaintext-marker-7f3a9c"),
		"TWO":  bytes.Repeat([]byte("repeated-marker-"), 500), // compressible, 8000 bytes
		"ROT":  []byte("first-rotation-marker"),
		"GONE": []byte("removed-secret-marker"),
	}
	for n, v := range values {
		if err := e.secrets.Set(ctx, n, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.secrets.Set(ctx, "ROT", []byte("second-rotation-marker")); err != nil {
		t.Fatal(err)
	}
	if err := e.secrets.Remove(ctx, "GONE"); err != nil {
		t.Fatal(err)
	}
	key, _ := os.ReadFile(e.keyPath())
	check := func(when string) {
		t.Helper()
		files, _ := filepath.Glob(e.dbPath() + "*") // zygo.db, -wal, -shm
		if len(files) == 0 {
			t.Fatalf("no database files at %s", e.dbPath())
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, marker := range []string{"plaintext-marker", "repeated-marker", "rotation-marker", "removed-secret"} {
				if bytes.Contains(data, []byte(marker)) {
					t.Errorf("%s: %s contains %q", when, filepath.Base(f), marker)
				}
			}
			if bytes.Contains(data, key) {
				t.Errorf("%s: %s contains the key", when, filepath.Base(f))
			}
		}
	}
	check("while open")
	if err := e.db.Close(); err != nil {
		t.Fatal(err)
	}
	check("after close")
}
