package pool

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/secret"
)

func tarOf(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		body := strings.Repeat("x", int(h.Size))
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	return b.Bytes()
}

// TestReadScript checks the bounds and path rules of an uploaded script, each refusal
// naming the entry, and that the hash depends on paths and contents only.
func TestReadScript(t *testing.T) {
	reg := func(name string, size int64) tar.Header {
		return tar.Header{Name: name, Typeflag: tar.TypeReg, Size: size, Mode: 0o644}
	}
	for _, c := range []struct {
		name string
		tar  []byte
		want error
	}{
		{"dotdot", tarOf(t, reg("../evil.py", 1)), errdefs.ErrInvalidArgument},
		{"absolute", tarOf(t, reg("/etc/x.py", 1)), errdefs.ErrInvalidArgument},
		{"hidden", tarOf(t, reg(".hidden", 1)), errdefs.ErrInvalidArgument},
		{"symlink", tarOf(t, tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}), errdefs.ErrInvalidArgument},
		{"too big", tarOf(t, reg("a.py", MaxScriptBytes+1)), errdefs.ErrTooLarge},
		{"file and dir", tarOf(t, reg("a", 1), reg("a/b.py", 1)), errdefs.ErrInvalidArgument},
		{"empty", tarOf(t), errdefs.ErrInvalidArgument},
		{"deep", tarOf(t, reg("a/b/c/d/e/f/g/h/i.py", 1)), errdefs.ErrInvalidArgument},
	} {
		_, err := ReadScript(bytes.NewReader(c.tar), true)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), "script") {
			t.Errorf("%s: %v; want %v naming the script", c.name, err, c.want)
		}
	}
	s, err := ReadScript(bytes.NewReader(tarOf(t, reg("./main.py", 3), reg("lib/x.py", 2))), true)
	if err != nil || len(s) != 2 || string(s["main.py"]) != "xxx" {
		t.Fatalf("%v %v", s, err)
	}
	one, _ := ReadScript(strings.NewReader("xxx"), false)
	if one.Hash() == s.Hash() || one.Hash() != (Script{"main.py": []byte("xxx")}).Hash() {
		t.Error("the hash is not over paths and contents only")
	}
	if (Script{"a": []byte("bc")}).Hash() == (Script{"ab": []byte("c")}).Hash() {
		t.Error("two scripts with the same bytes in other places share a hash")
	}
	for _, bad := range []string{"", "A", "-a", "a-", "a--b", "a_b", strings.Repeat("a", 64)} {
		if secret.ValidTenant("tenant", bad) == nil {
			t.Errorf("tenant %q accepted", bad)
		}
	}
	if secret.TenantName("a-b", "DB") != "tenant_a_b__DB" {
		t.Error(secret.TenantName("a-b", "DB"))
	}
}

// TestScriptEviction: storing a script past MaxScriptsPerTenant evicts the least recently
// used one not used within evictAfter, and refuses (429) when all are recent.
func TestScriptEviction(t *testing.T) {
	st := scriptStore{root: t.TempDir(), gid: -1}
	old, err := st.put("t", Script{"main.py": []byte("old")})
	if err != nil {
		t.Fatal(err)
	}
	recent, _ := st.put("t", Script{"main.py": []byte("recent")})
	long := time.Now().Add(-2 * evictAfter)
	os.Chtimes(st.dir("t", old), long, long)
	if err := st.evict("t", 1); err != nil {
		t.Fatal(err)
	}
	if st.has("t", old) == nil || st.has("t", recent) != nil {
		t.Error("eviction removed the wrong script")
	}
	st.put("t", Script{"main.py": []byte("another")})
	err = st.evict("t", 1)
	if !errors.Is(err, errdefs.ErrTooManyRequests) {
		t.Errorf("evicting recent scripts: %v; want ErrTooManyRequests", err)
	}
	// It says when a retry may succeed: when the least recently used one may be evicted.
	var full *ScriptsFullError
	if !errors.As(err, &full) || full.RetryAfter() <= 0 || full.RetryAfter() > evictAfter {
		t.Errorf("evicting recent scripts: %v; want a ScriptsFullError with RetryAfter in (0, %v]", err, evictAfter)
	}
}
