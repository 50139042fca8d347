package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/test/e2eutil"
)

// nativeRandFunction writes a function whose import loads libtoken.so (compiled by the test
// from testdata/nativerand/SRC with gcc) through ctypes; its handler returns the library's
// 16-byte token, LD_PRELOAD as the request sees it, and the environment a process it execs
// gets. extra is appended to zygo.toml.
func nativeRandFunction(t *testing.T, name, src, extra string) string {
	t.Helper()
	dir := writeFunction(t, map[string]string{
		"zygo.toml": fmt.Sprintf("name = %q\nruntime = \"python\"\nhandler = \"main:handler\"\nconcurrency = 4\n%s\n", name, extra),
		"main.py": `
import ctypes, os, subprocess

_lib = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "libtoken.so"))

def handler(event, context):
    buf = ctypes.create_string_buffer(16)
    _lib.zygo_token(buf)
    child_env = subprocess.run(["/usr/bin/env"], capture_output=True, text=True).stdout
    return {"token": buf.raw.hex(), "ld_preload": os.environ.get("LD_PRELOAD"),
            "child_ld_preload": [l for l in child_env.splitlines() if l.startswith("LD_PRELOAD=")]}
`,
	})
	if err := e2eutil.CompileShared(filepath.Join(dir, "libtoken.so"), fixture(filepath.Join("nativerand", src))); err != nil {
		t.Fatal(err)
	}
	return dir
}

type tokenResult struct {
	Token          string   `json:"token"`
	LDPreload      *string  `json:"ld_preload"`
	ChildLDPreload []string `json:"child_ld_preload"`
}

func invokeTokens(t *testing.T, d *Daemon, name string, n, conc int) []tokenResult {
	t.Helper()
	var out []tokenResult
	for _, raw := range d.InvokeMany(name, n, conc, func(int) any { return map[string]any{} }) {
		var r tokenResult
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("decoding %s: %v", raw, err)
		}
		if r.LDPreload != nil || len(r.ChildLDPreload) > 0 {
			t.Fatalf("the guard's LD_PRELOAD reached the request (%v) or what it execs (%v)", r.LDPreload, r.ChildLDPreload)
		}
		out = append(out, r)
	}
	return out
}

func distinctTokens(rs []tokenResult) int {
	var toks []string
	for _, r := range rs {
		toks = append(toks, r.Token)
	}
	return distinct(toks)
}

var nativeRandLibs = []struct{ name, src, via string }{
	{"getrandom", "getrandom_buf.c", "getrandom"},
	{"urandom", "urandom_buf.c", "fread(/dev/*random)"},
}

// TestNativeRandomNamedAtWarmup: a native library that fills a buffer from getrandom(2), or
// from /dev/urandom with fopen+fread, when the function's import loads it. Warm-up must name
// the library, how it drew, and the mitigation in `zygo logs`; with the default
// on_native_random = "warn" the function keeps forking, so every request gets the same bytes
// (what the check warns about), and the guard's LD_PRELOAD reaches neither the request nor
// what it execs.
func TestNativeRandomNamedAtWarmup(t *testing.T) {
	d := startDaemon(t, "")
	for _, lib := range nativeRandLibs {
		t.Run(lib.name, func(t *testing.T) {
			name := "natrand-warn-" + lib.name
			d.Up(nativeRandFunction(t, name, lib.src, ""))
			var check string
			for _, l := range d.Logs(name, "") {
				if strings.Contains(l, "warm-up native_random") {
					check = l
				}
			}
			for _, want := range []string{"[warn]", "libtoken.so", lib.via, `mode = "spawn"`, "main:handler"} {
				if !strings.Contains(check, want) {
					t.Fatalf("the native_random warm-up line does not say %q: %q\nlogs:\n%s", want, check, strings.Join(d.Logs(name, ""), "\n"))
				}
			}
			if got := distinctTokens(invokeTokens(t, d, name, 6, 3)); got != 1 {
				t.Fatalf("forked requests saw %d distinct tokens; the zygote's buffer is shared, so 1 was expected (has the library become fork-aware?)", got)
			}
		})
	}
}

// TestNativeRandomSpawnOption: with on_native_random = "spawn" the same functions fall back to
// a fresh interpreter per request, so each of 11 requests (sequential, then concurrent) gets
// its own 16 bytes.
func TestNativeRandomSpawnOption(t *testing.T) {
	d := startDaemon(t, "")
	for _, lib := range nativeRandLibs {
		t.Run(lib.name, func(t *testing.T) {
			name := "natrand-spawn-" + lib.name
			d.Up(nativeRandFunction(t, name, lib.src, `on_native_random = "spawn"`))
			fell := false
			for _, l := range d.Logs(name, "") {
				fell = fell || strings.Contains(l, "falling back to spawn mode") && strings.Contains(l, "on_native_random")
			}
			if !fell {
				t.Fatalf("no fallback to spawn in the logs:\n%s", strings.Join(d.Logs(name, ""), "\n"))
			}
			for _, conc := range []int{1, 4} {
				if got := distinctTokens(invokeTokens(t, d, name, 11, conc)); got != 11 {
					t.Fatalf("concurrency %d: %d distinct tokens of 11", conc, got)
				}
			}
		})
	}
}
