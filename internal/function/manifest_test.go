package function_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
)

const (
	pyBase   = "name = \"hello\"\nruntime = \"python\"\nhandler = \"main:handler\"\n"
	nodeBase = "name = \"hello\"\nruntime = \"node\"\nhandler = \"index.js:handler\"\n"
)

// badManifest is a zygo.toml that ParseManifest must refuse, and the text the
// error must contain: the offending key as the error names it.
type badManifest struct {
	name string
	toml string
	want string
}

func TestParseManifestRejects(t *testing.T) {
	long := strings.Repeat("a", 64)
	longSecret := "S" + strings.Repeat("x", 128)
	var cases []badManifest
	add := func(group string, cs ...badManifest) {
		for _, c := range cs {
			c.name = group + "/" + c.name
			cases = append(cases, c)
		}
	}
	add("env",
		badManifest{"NUL in a value", pyBase + "[env]\nA = \"x\\u0000y\"\n", "env.A: contains a NUL byte"},
		badManifest{"value too long", pyBase + "[env]\nA = \"" + strings.Repeat("v", function.MaxEnvValueBytes+1) + "\"\n", "env.A: is 32769 bytes"},
		badManifest{"all too long", pyBase + "[env]\n" + manyEnv(5, function.MaxEnvValueBytes), "env: is 163"},
		badManifest{"name too long", pyBase + "[env]\n" + strings.Repeat("N", 129) + " = \"x\"\n", "env: a variable name is longer"},
	)
	add("python_path",
		badManifest{"node", nodeBase + "python_path = [\"vendor\"]\n", "python_path: applies only to runtime = \"python\""},
		badManifest{"absolute", pyBase + "python_path = [\"/usr/lib\"]\n", "python_path[0]: \"/usr/lib\" must be a relative path"},
		badManifest{"dotdot", pyBase + "python_path = [\"vendor\", \"../x\"]\n", "python_path[1]: \"../x\" must be a clean path"},
		badManifest{"inner dotdot", pyBase + "python_path = [\"a/../../x\"]\n", "python_path[0]: \"a/../../x\" must be a clean path"},
		badManifest{"unclean", pyBase + "python_path = [\"./vendor\"]\n", "python_path[0]: \"./vendor\" must be a clean path"},
		badManifest{"dot", pyBase + "python_path = [\".\"]\n", "python_path[0]: \".\" must name a directory inside"},
		badManifest{"empty", pyBase + "python_path = [\"\"]\n", "python_path[0]: \"\" must name a directory inside"},
		badManifest{"colon", pyBase + "python_path = [\"a:b\"]\n", "python_path[0]: \"a:b\" is not a usable path"},
		badManifest{"twice", pyBase + "python_path = [\"v\", \"v\"]\n", "python_path[1]: \"v\" is listed twice"},
		badManifest{"string", pyBase + "python_path = \"vendor\"\n", `"python_path"`},
		badManifest{"too many", pyBase + "python_path = [" + strings.Repeat("\"v\",", 33) + "]\n", "python_path: has 33 entries"},
	)
	add("unknown",
		badManifest{"top level", pyBase + "colour = \"red\"\n", `unknown key "colour"`},
		badManifest{"top level table", pyBase + "[build]\ncmd = \"make\"\n", `unknown key "build"`},
		badManifest{"in limits", pyBase + "[limits]\nmemory = 64\n", `unknown key "limits.memory"`},
		badManifest{"table under env", pyBase + "[env.sub]\nx = \"y\"\n", `"env.sub"`},
	)
	add("type",
		badManifest{"name int", "name = 5\nruntime = \"python\"\nhandler = \"main:handler\"\n", `"name"`},
		badManifest{"runtime int", "name = \"a\"\nruntime = 1\nhandler = \"main:handler\"\n", `"runtime"`},
		badManifest{"strict string", pyBase + "strict = \"yes\"\n", `"strict"`},
		badManifest{"concurrency float", pyBase + "concurrency = 1.5\n", `"concurrency"`},
		badManifest{"concurrency overflow", pyBase + "concurrency = 99999999999999999999\n", `"concurrency"`},
		badManifest{"secrets string", pyBase + "secrets = \"API_KEY\"\n", `"secrets"`},
		badManifest{"secrets of ints", pyBase + "secrets = [1]\n", `"secrets"`},
		badManifest{"mode int", pyBase + "mode = 5\n", `"mode"`},
		badManifest{"timeout string", pyBase + "[limits]\ntimeout_ms = \"30s\"\n", `"limits.timeout_ms"`},
		badManifest{"limits scalar", pyBase + "limits = 5\n", `"limits"`},
		badManifest{"env value int", pyBase + "[env]\nFOO = 1\n", `"env.FOO"`},
		badManifest{"env string", pyBase + "env = \"FOO=bar\"\n", "zygo.toml: env:"},
		badManifest{"env int", pyBase + "env = 5\n", "zygo.toml: env:"},
		badManifest{"env array", pyBase + "env = [\"FOO=bar\"]\n", "zygo.toml: env:"},
		badManifest{"not toml", "name = \n", "zygo.toml"},
	)
	for _, l := range []struct {
		key     string
		lo, hi  string // first value out of range on each side
		zeroBad bool
	}{
		{"timeout_ms", "-1", "900001", false},
		{"memory_mib", "15", "65537", false},
		{"pids", "-1", "65537", false},
		{"cpu_ms", "-1", "900001", false},
		{"max_request_kib", "-1", "65537", false},
		{"max_response_kib", "-1", "65537", false},
		{"zygote_memory_mib", "15", "65537", false},
		{"zygote_pids", "7", "65537", false},
	} {
		want := "zygo.toml: limits." + l.key + ":"
		add("limits",
			badManifest{l.key + " low", pyBase + "[limits]\n" + l.key + " = " + l.lo + "\n", want},
			badManifest{l.key + " high", pyBase + "[limits]\n" + l.key + " = " + l.hi + "\n", want},
		)
	}
	// Idle pre-forked children count in zygote_pids, with bwrap and the zygote.
	add("limits",
		badManifest{"zygote_pids below prefork", pyBase + "prefork = 10\n[limits]\nzygote_pids = 12\n",
			"zygo.toml: limits.zygote_pids: 12 leaves no room for prefork = 10"},
		badManifest{"zygote_pids string", pyBase + "[limits]\nzygote_pids = \"many\"\n", `"limits.zygote_pids"`},
	)
	for _, n := range []string{"", "Hello", "-hello", "hello_world", "hello world", "héllo", "a/b", long} {
		add("name", badManifest{"name " + n, "name = \"" + n + "\"\nruntime = \"python\"\nhandler = \"main:handler\"\n", "zygo.toml: name:"})
	}
	add("name", badManifest{"missing", "runtime = \"python\"\nhandler = \"main:handler\"\n", "zygo.toml: name: is required"})
	add("runtime",
		badManifest{"missing", "name = \"a\"\nhandler = \"main:handler\"\n", "zygo.toml: runtime: is required"},
		badManifest{"ruby", "name = \"a\"\nruntime = \"ruby\"\nhandler = \"main:handler\"\n", "zygo.toml: runtime:"},
		badManifest{"capitalised", "name = \"a\"\nruntime = \"Python\"\nhandler = \"main:handler\"\n", "zygo.toml: runtime:"},
	)
	for _, h := range []string{"", "main", "main.handler", "main:", ":handler", "1main:handler", "main:handler()",
		"main:1handler", "pkg/main:handler", "main:handler:x", "main-x:handler"} {
		add("python handler", badManifest{h, "name = \"a\"\nruntime = \"python\"\nhandler = \"" + h + "\"\n", "zygo.toml: handler:"})
	}
	for _, h := range []string{"", "index:handler", "index.py:handler", "index.js:", "index.js:1handler",
		"index.js", "main:handler", "index.ts:handler", "in dex.js:handler", "index.js:handler.x",
		"../x.js:handler", "/abs/x.js:handler", "a/../../x.js:handler", "./x.js:handler"} {
		add("node handler", badManifest{h, "name = \"a\"\nruntime = \"node\"\nhandler = \"" + h + "\"\n", "zygo.toml: handler:"})
	}
	add("mode",
		badManifest{"unknown", pyBase + "mode = \"thread\"\n", "zygo.toml: mode:"},
		badManifest{"spawn with node", nodeBase + "mode = \"spawn\"\n", "zygo.toml: mode:"},
	)
	add("strict", badManifest{"with node", nodeBase + "strict = true\n", "zygo.toml: strict:"})
	for _, i := range []string{"python3", "bin/python3", "/usr/bin/../bin/python3", "/usr/bin/python3/", "//usr/bin/python3"} {
		add("interpreter", badManifest{i, pyBase + "interpreter = \"" + i + "\"\n", "zygo.toml: interpreter:"})
	}
	add("concurrency",
		badManifest{"negative", pyBase + "concurrency = -1\n", "zygo.toml: concurrency:"},
		badManifest{"above max", pyBase + "concurrency = 257\n", "zygo.toml: concurrency:"},
	)
	add("queue",
		badManifest{"negative", pyBase + "queue = -1\n", "zygo.toml: queue: -1 is outside 0..10000"},
		badManifest{"above max", pyBase + "queue = 10001\n", "zygo.toml: queue: 10001 is outside 0..10000"},
		badManifest{"string", pyBase + "queue = \"16\"\n", "queue"},
	)
	add("limits.import_timeout_ms",
		badManifest{"too small", pyBase + "[limits]\nimport_timeout_ms = 99\n", "zygo.toml: limits.import_timeout_ms: 99 is outside 100..1800000"},
		badManifest{"above max", pyBase + "[limits]\nimport_timeout_ms = 1800001\n", "zygo.toml: limits.import_timeout_ms:"},
		badManifest{"negative", pyBase + "[limits]\nimport_timeout_ms = -5\n", "zygo.toml: limits.import_timeout_ms:"},
	)
	add("prefork",
		badManifest{"node", nodeBase + "prefork = 1\n", "zygo.toml: prefork:"},
		badManifest{"negative", pyBase + "prefork = -1\n", "zygo.toml: prefork:"},
		badManifest{"above max", pyBase + "prefork = 65\n", "zygo.toml: prefork:"},
	)
	add("pool_size",
		badManifest{"python", pyBase + "pool_size = 2\n", "zygo.toml: pool_size:"},
		badManifest{"python negative", pyBase + "pool_size = -1\n", "zygo.toml: pool_size:"},
		badManifest{"node negative", nodeBase + "pool_size = -1\n", "zygo.toml: pool_size:"},
		badManifest{"node above max", nodeBase + "pool_size = 65\n", "zygo.toml: pool_size:"},
	)
	for _, s := range []string{"1KEY", "API-KEY", "API KEY", "", "../etc", "a/b", longSecret} {
		add("secrets", badManifest{"name " + s, pyBase + "secrets = [\"" + s + "\"]\n", "zygo.toml: secrets:"})
	}
	add("secrets", badManifest{"a pool tenant's", pyBase + "secrets = [\"tenant_acme__DB\"]\n", "zygo.toml: secrets: \"tenant_acme__DB\": names beginning with tenant_ are pool tenants' secrets"})
	add("secrets", badManifest{"duplicate", pyBase + "secrets = [\"API_KEY\", \"DB\", \"API_KEY\"]\n", "zygo.toml: secrets: \"API_KEY\" is listed twice"})
	for _, k := range []string{"TMPDIR", "HOME", "PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "ZYGO_", "ZYGO_REQUEST_ID"} {
		add("env reserved", badManifest{k, pyBase + "[env]\n" + k + " = \"x\"\n", "zygo.toml: env." + k + ": is reserved"})
	}
	for _, k := range []string{"1FOO", "FOO-BAR", "FOO.BAR", "FOO BAR"} {
		add("env name", badManifest{k, pyBase + "[env]\n\"" + k + "\" = \"x\"\n", "zygo.toml: env." + k + ":"})
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := function.ParseManifest([]byte(c.toml))
			if err == nil {
				t.Fatalf("ParseManifest accepted:\n%s\nas %+v", c.toml, m)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error %q does not wrap ErrInvalidArgument", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
			if m != nil {
				t.Errorf("ParseManifest returned a manifest with its error: %+v", m)
			}
		})
	}
}

// The edges of every range are accepted, so the rejections above are not
// off by one.
func TestParseManifestAcceptsBounds(t *testing.T) {
	for _, c := range []struct{ name, toml string }{
		{"name one char", "name = \"a\"\nruntime = \"python\"\nhandler = \"main:handler\"\n"},
		{"name 63 chars", "name = \"" + strings.Repeat("a", 63) + "\"\nruntime = \"python\"\nhandler = \"main:handler\"\n"},
		{"name digits and dashes", "name = \"0-a-\"\nruntime = \"python\"\nhandler = \"main:handler\"\n"},
		{"dotted python module", "name = \"a\"\nruntime = \"python\"\nhandler = \"pkg.sub_mod._m:_handle2\"\n"},
		{"node mjs in a subdir", "name = \"a\"\nruntime = \"node\"\nhandler = \"src/app.mjs:$handle_1\"\n"},
		{"node cjs", "name = \"a\"\nruntime = \"node\"\nhandler = \"app.cjs:h\"\n"},
		{"limits low", pyBase + "prefork = 0\n[limits]\ntimeout_ms = 1\nmemory_mib = 16\npids = 1\ncpu_ms = 1\nmax_request_kib = 1\nmax_response_kib = 1\nzygote_memory_mib = 16\nzygote_pids = 8\n"},
		{"limits high", pyBase + "[limits]\ntimeout_ms = 900000\nmemory_mib = 65536\npids = 65536\ncpu_ms = 900000\nmax_request_kib = 65536\nmax_response_kib = 65536\nzygote_memory_mib = 65536\nzygote_pids = 65536\n"},
		{"zygote_pids just fits prefork", pyBase + "prefork = 10\n[limits]\nzygote_pids = 13\n"},
		{"concurrency bounds", pyBase + "concurrency = 256\n"},
		{"queue 0 (none)", pyBase + "queue = 0\n"},
		{"queue max", pyBase + "queue = 10000\n"},
		{"import_timeout_ms bounds", pyBase + "[limits]\nimport_timeout_ms = 100\n"},
		{"import_timeout_ms max", pyBase + "[limits]\nimport_timeout_ms = 1800000\n"},
		{"pool_size 0 (a fresh worker per request)", nodeBase + "pool_size = 0\n"},
		{"pool_size 1", nodeBase + "pool_size = 1\n"},
		{"prefork 0", pyBase + "prefork = 0\n"},
		{"prefork 64", pyBase + "prefork = 64\n"},
		{"pool_size 64", nodeBase + "pool_size = 64\n"},
		{"secret 128 chars", pyBase + "secrets = [\"S" + strings.Repeat("x", 127) + "\"]\n"},
		{"spawn with python", pyBase + "mode = \"spawn\"\n"},
		{"strict with python", pyBase + "strict = true\n"},
		{"env inline table", pyBase + "env = { GREETING = \"hi\", _X1 = \"\" }\n"},
		{"env lower-case path is not PATH", pyBase + "[env]\npath = \"x\"\nMY_ZYGO_X = \"y\"\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := function.ParseManifest([]byte(c.toml)); err != nil {
				t.Fatalf("ParseManifest(%q): %v", c.toml, err)
			}
		})
	}
}

func TestParseManifestDefaults(t *testing.T) {
	py, err := function.ParseManifest([]byte(pyBase))
	if err != nil {
		t.Fatal(err)
	}
	want := function.Manifest{
		Name: "hello", Runtime: function.RuntimePython, Handler: "main:handler", Mode: function.ModeFork,
		Interpreter: "/usr/bin/python3", Concurrency: 8, Queue: intp(16), PoolSize: nil, PreFork: intp(2),
		Limits: function.Limits{TimeoutMs: 30000, MemoryMiB: 256, MaxRequestKiB: 6 * 1024, MaxResponseKiB: 6 * 1024,
			ZygoteMemoryMiB: 1024, ZygotePIDs: 256},
	}
	checkManifest(t, "python", py, &want)

	node, err := function.ParseManifest([]byte(nodeBase))
	if err != nil {
		t.Fatal(err)
	}
	want.Runtime, want.Handler, want.Interpreter, want.PoolSize, want.PreFork = function.RuntimeNode, "index.js:handler", "/usr/bin/node", intp(2), nil
	want.Mode = function.ModeWorker
	checkManifest(t, "node", node, &want)

	// queue defaults to twice concurrency; queue = 0 is kept (no queue).
	q, err := function.ParseManifest([]byte(pyBase + "concurrency = 3\n"))
	if err != nil || q.QueueLen() != 6 {
		t.Errorf("queue of concurrency = 3: %v, %v; want 6", q.QueueLen(), err)
	}
	if q, err := function.ParseManifest([]byte(pyBase + "queue = 0\n")); err != nil || q.QueueLen() != 0 {
		t.Errorf("queue = 0: %v, %v", q, err)
	}

	// Zero values of optional keys mean "default", set values are kept.
	set, err := function.ParseManifest([]byte(nodeBase + `interpreter = "/opt/node/bin/node"
concurrency = 3
pool_size = 5
secrets = ["B", "A"]
[env]
GREETING = "hi"
[limits]
timeout_ms = 1500
memory_mib = 64
pids = 32
cpu_ms = 700
max_request_kib = 10
max_response_kib = 20
zygote_memory_mib = 512
zygote_pids = 40
import_timeout_ms = 20000
`))
	if err != nil {
		t.Fatal(err)
	}
	want = function.Manifest{
		Name: "hello", Runtime: function.RuntimeNode, Handler: "index.js:handler", Mode: function.ModeWorker,
		Interpreter: "/opt/node/bin/node", Concurrency: 3, Queue: intp(6), PoolSize: intp(5), Secrets: []string{"B", "A"},
		Env: map[string]string{"GREETING": "hi"},
		Limits: function.Limits{TimeoutMs: 1500, MemoryMiB: 64, PIDs: 32, CPUMs: 700, MaxRequestKiB: 10, MaxResponseKiB: 20,
			ZygoteMemoryMiB: 512, ZygotePIDs: 40, ImportTimeoutMs: 20000},
	}
	checkManifest(t, "explicit", set, &want)
}

func checkManifest(t *testing.T, what string, got, want *function.Manifest) {
	t.Helper()
	if got.Name != want.Name || got.Runtime != want.Runtime || got.Handler != want.Handler || got.Mode != want.Mode ||
		got.Interpreter != want.Interpreter || got.Concurrency != want.Concurrency || !eqIntp(got.Queue, want.Queue) || !eqIntp(got.PoolSize, want.PoolSize) || !eqIntp(got.PreFork, want.PreFork) ||
		got.Strict != want.Strict || got.Limits != want.Limits || !slices.Equal(got.Secrets, want.Secrets) ||
		len(got.Env) != len(want.Env) {
		t.Errorf("%s manifest:\n got %+v\nwant %+v", what, *got, *want)
	}
	for k, v := range want.Env {
		if got.Env[k] != v {
			t.Errorf("%s manifest: env %s = %q, want %q", what, k, got.Env[k], v)
		}
	}
}

func TestSortedEnv(t *testing.T) {
	m, err := function.ParseManifest([]byte(pyBase + "[env]\nZED = \"1\"\nALPHA = \"a=b\"\nMID = \"\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := m.SortedEnv()
	want := []string{"ALPHA=a=b", "MID=", "ZED=1"}
	if !slices.Equal(got, want) {
		t.Errorf("SortedEnv = %q, want %q", got, want)
	}
}

func TestLoadManifest(t *testing.T) {
	dir := t.TempDir()
	if _, err := function.LoadManifest(dir); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "zygo.toml") {
		t.Errorf("LoadManifest on a dir without zygo.toml: %v, want ErrInvalidArgument naming zygo.toml", err)
	}
	if err := os.WriteFile(filepath.Join(dir, function.ManifestFile), []byte(pyBase), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := function.LoadManifest(dir)
	if err != nil || m.Name != "hello" {
		t.Errorf("LoadManifest = %+v, %v", m, err)
	}
}

func intp(n int) *int { return &n }

func eqIntp(a, b *int) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

// manyEnv returns n [env] lines, each a value of size bytes.
func manyEnv(n, size int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "V%d = \"%s\"\n", i, strings.Repeat("v", size))
	}
	return b.String()
}
