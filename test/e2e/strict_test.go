package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStrictMode(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(fixture("strictfn"))
	var r map[string]string
	d.Invoke("strictfn", map[string]any{}, &r)
	want := map[string]string{"subprocess": "PermissionError", "fork": "PermissionError", "thread": "ok:42"}
	for k, v := range want {
		if r[k] != v {
			t.Errorf("strict: %s = %q, want %q", k, r[k], v)
		}
	}
	// The same code without strict may fork and exec.
	src, _ := os.ReadFile(filepath.Join(fixture("strictfn"), "main.py"))
	lax := writeFunction(t, map[string]string{
		"zygo.toml": strings.Replace(strings.Replace(mustRead(t, filepath.Join(fixture("strictfn"), "zygo.toml")),
			"strict = true", "strict = false", 1), `name = "strictfn"`, `name = "laxfn"`, 1),
		"main.py": string(src),
	})
	d.Up(lax)
	d.Invoke("laxfn", map[string]any{}, &r)
	want = map[string]string{"subprocess": "ok:0", "fork": "ok:forked", "thread": "ok:42"}
	for k, v := range want {
		if r[k] != v {
			t.Errorf("not strict: %s = %q, want %q", k, r[k], v)
		}
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
