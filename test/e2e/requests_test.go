package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// versionedSleeper returns a handler that sleeps event["sleep"] seconds
// (default 0.05) and returns version.
func versionedSleeper(version int) string {
	return fmt.Sprintf("import time\nVERSION = %d\ndef handler(event, context):\n    time.sleep(event.get('sleep', 0.05))\n    return VERSION\n", version)
}

// Issue 12.5: requests queued for a concurrency slot of a version that a
// deploy replaces are served by the version current when they get a slot:
// none fails, and none is answered by a version older than the last deploy
// completed before it was sent.
func TestDeployUnderLoadServesQueuedRequests(t *testing.T) {
	d := startDaemon(t, "")
	// queue: the 6 clients beyond concurrency all wait (the default queue, twice concurrency,
	// would refuse some with 429: that bound has its own test, TestQueueFullIs429).
	const manifest = "name = \"busy\"\nruntime = \"python\"\nhandler = \"main:handler\"\nconcurrency = 2\nqueue = 16\n"
	d.Up(writeFunction(t, map[string]string{"zygo.toml": manifest, "main.py": versionedSleeper(1)}))
	var deployed, served atomic.Int64
	deployed.Store(1)
	stop := make(chan struct{})
	var mu sync.Mutex
	var problems []string
	var wg sync.WaitGroup
	const clients = 8 // four times concurrency: most requests wait for a slot
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				floor := deployed.Load()
				res, err := d.TryInvoke("busy", map[string]any{})
				var v int64
				if err == nil {
					err = json.Unmarshal(res.Value, &v)
				}
				mu.Lock()
				switch {
				case err != nil:
					problems = append(problems, err.Error())
				case v < floor:
					problems = append(problems, fmt.Sprintf("answered by v%d, sent after v%d was deployed", v, floor))
				default:
					served.Add(1)
				}
				mu.Unlock()
			}
		}()
	}
	const last = 6
	for v := 2; v <= last; v++ {
		d.Up(writeFunction(t, map[string]string{"zygo.toml": manifest, "main.py": versionedSleeper(v)}))
		deployed.Store(int64(v))
	}
	// A few more rounds on the last version, then stop.
	for served.Load() < int64(clients*4) {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if len(problems) > 0 {
		t.Fatalf("%d of %d requests went wrong across %d deploys, first: %s", len(problems), int(served.Load())+len(problems), last-1, problems[0])
	}
	t.Logf("%d requests served across %d deploys, none failed", served.Load(), last-1)
}

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

type zeroBytes struct{}

func (zeroBytes) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// Issue 12.6: an event over the function's own max_request_kib is refused
// (413) without the daemon reading it whole, with or without a declared
// length.
func TestEventOverTheFunctionsLimitIsNotRead(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(writeFunction(t, map[string]string{
		"zygo.toml": "name = \"small\"\nruntime = \"python\"\nhandler = \"main:handler\"\n[limits]\nmax_request_kib = 1\n",
		"main.py":   "def handler(event, context):\n    return len(str(event))\n",
	}))
	const size = 48 << 20 // under the server-wide 64 MiB bound, far over 1 KiB
	client := unixHTTP(d)
	for _, declared := range []bool{true, false} {
		body := &countingReader{r: io.LimitReader(zeroBytes{}, size)}
		req, err := http.NewRequest("POST", "http://zygo/v1/functions/small/invoke", struct{ io.Reader }{body})
		if err != nil {
			t.Fatal(err)
		}
		if declared {
			req.ContentLength = size
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("declared=%v: %v", declared, err)
		}
		var eb struct{ Error wire.ErrorBody }
		_ = json.NewDecoder(resp.Body).Decode(&eb)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || eb.Error.Code != "too_large" || !strings.Contains(eb.Error.Message, "max_request_kib=1") {
			t.Errorf("declared=%v: status %d %+v, want 413 too_large naming max_request_kib", declared, resp.StatusCode, eb.Error)
		}
		// What the client got to send: the daemon's reads plus socket buffers.
		if n := body.n.Load(); n > 8<<20 {
			t.Errorf("declared=%v: the daemon took %d MiB of a %d MiB event over a 1 KiB limit", declared, n>>20, size>>20)
		}
		t.Logf("declared=%v: %d KiB of the body sent before the 413", declared, body.n.Load()>>10)
	}
	var n int
	d.Invoke("small", map[string]any{"a": 1}, &n) // a small event still works
}

// dirNames lists the names in dir (none when it does not exist).
func dirNames(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// waitUntil polls cond every 50 ms for up to limit (the async work under
// test has no event to wait on), reporting what was last seen on failure.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last seen: %s", what, limit, seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func functionStatus(t *testing.T, d *Daemon, name string) wire.Function {
	t.Helper()
	fs, err := d.Client.Functions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("%s is not listed", name)
	return wire.Function{}
}

// Issue 12.7: a zygote that dies gives back its run directory (and its
// /tmp) when it is replaced, not at the daemon's restart.
func TestDeadZygoteGivesBackItsRunDir(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(writeFunction(t, map[string]string{
		"zygo.toml": "name = \"mortal\"\nruntime = \"python\"\nhandler = \"main:handler\"\n",
		"main.py":   "def handler(event, context):\n    return 1\n",
	}))
	runDir := filepath.Join(d.StateDir, "run")
	for round := range 3 {
		before := functionStatus(t, d, "mortal").ZygotePID
		if before == 0 {
			t.Fatal("no zygote pid")
		}
		if err := syscall.Kill(before, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 30*time.Second, "a new zygote", func() (bool, string) {
			s := functionStatus(t, d, "mortal")
			return s.State == "ready" && s.ZygotePID != 0 && s.ZygotePID != before, fmt.Sprintf("%s pid %d", s.State, s.ZygotePID)
		})
		if left := dirNames(runDir); len(left) != 1 {
			t.Fatalf("round %d: %d run directories for one live zygote: %v", round, len(left), left)
		}
	}
	var v int
	d.Invoke("mortal", map[string]any{}, &v)
}

// Issue 12.7: a deploy that fails leaves no version directory; `zygo rm`
// removes what an older daemon left for a name that never became active.
func TestFailedDeployLeavesNoVersion(t *testing.T) {
	d := startDaemon(t, "")
	broken := writeFunction(t, map[string]string{
		"zygo.toml": "name = \"never\"\nruntime = \"python\"\nhandler = \"main:handler\"\n",
		"main.py":   "import no_such_module_zygo\n",
	})
	if _, errOut, code := d.CLI("up", broken); code == 0 || !strings.Contains(errOut, "ModuleNotFoundError") {
		t.Fatalf("broken deploy: exit %d %s", code, errOut)
	}
	if left := dirNames(filepath.Join(d.StateDir, "versions", "never")); left != nil {
		t.Errorf("the failed deploy left version directories: %v", left)
	}
	if _, _, code := d.CLI("rm", "never"); code == 0 {
		t.Error("zygo rm of a name with nothing stored succeeded")
	}

	// What a failed deploy of an older daemon left behind.
	ghost := filepath.Join(d.StateDir, "versions", "ghost", "0123456789abcdef0123456789abcdef")
	if err := os.MkdirAll(ghost, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ghost, "main.py"), []byte("x = 1\n"), 0o444)
	if out, errOut, code := d.CLI("rm", "ghost"); code != 0 {
		t.Fatalf("zygo rm ghost: exit %d %s %s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Dir(ghost)); err == nil {
		t.Error("zygo rm left the never-deployed name's versions")
	}
}

// Issue 12.7: superseded versions beyond the retention count (2) are
// collected, but never one a request still runs on.
func TestSupersededVersionsAreCollected(t *testing.T) {
	d := startDaemonArgs(t, "--keep-versions", "3") // the active version and 2 retained
	const manifest = "name = \"gc\"\nruntime = \"python\"\nhandler = \"main:handler\"\n"
	versionsDir := filepath.Join(d.StateDir, "versions", "gc")
	dirOf := func(dir string) string {
		var buf bytes.Buffer
		if err := function.PackDir(dir, &buf); err != nil {
			t.Fatal(err)
		}
		u, err := function.ReadBundle(&buf)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimPrefix(u.Hash, "sha256:")[:32]
	}
	v1 := writeFunction(t, map[string]string{"zygo.toml": manifest, "main.py": versionedSleeper(1)})
	d.Up(v1)
	held := make(chan error, 1)
	go func() {
		res, err := d.TryInvoke("gc", map[string]any{"sleep": 15})
		if err == nil && string(res.Value) != "1" {
			err = fmt.Errorf("answer %s, want 1", res.Value)
		}
		held <- err
	}()
	waitUntil(t, 10*time.Second, "the long request to start", func() (bool, string) {
		s := functionStatus(t, d, "gc")
		return s.InFlight == 1, fmt.Sprintf("in flight %d", s.InFlight)
	})
	for v := 2; v <= 5; v++ {
		d.Up(writeFunction(t, map[string]string{"zygo.toml": manifest, "main.py": versionedSleeper(v)}))
	}
	select {
	case err := <-held:
		t.Fatalf("the long request ended before the test could look (%v): make it longer", err)
	default:
	}
	if _, err := os.Stat(filepath.Join(versionsDir, dirOf(v1))); err != nil {
		t.Errorf("v1 was collected while a request ran on it: %v", err)
	}
	if err := <-held; err != nil {
		t.Fatalf("the request on v1 failed across 4 deploys: %v", err)
	}
	waitUntil(t, 30*time.Second, "collection down to the active version and 2 retained", func() (bool, string) {
		left := dirNames(versionsDir)
		return len(left) == 3, strings.Join(left, " ")
	})
	var v int
	d.Invoke("gc", map[string]any{}, &v)
	if v != 5 {
		t.Fatalf("active version answers %d", v)
	}
}

// rawTarGz builds a gzip'd tar of regular files, names exactly as given.
func rawTarGz(t *testing.T, files [][2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f[0], Mode: 0o644, Size: int64(len(f[1]))}); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, f[1])
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// post sends body to path on the daemon and returns the status and error body.
func post(t *testing.T, d *Daemon, path string, body []byte) (int, wire.ErrorBody) {
	t.Helper()
	resp, err := unixHTTP(d).Post("http://zygo"+path, "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb struct{ Error wire.ErrorBody }
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	return resp.StatusCode, eb.Error
}

// checkBadRequest fails unless the answer is a 400 naming field, without a
// host path the caller did not give (in given).
func checkBadRequest(t *testing.T, d *Daemon, what string, status int, eb wire.ErrorBody, field, given string) {
	t.Helper()
	if status != http.StatusBadRequest || !strings.Contains(eb.Message, field) {
		t.Errorf("%s: status %d %+v, want 400 naming %q", what, status, eb, field)
	}
	for _, p := range []string{d.StateDir, "/run/zygo", "/opt/zygo"} {
		if strings.Contains(eb.Message+eb.Traceback, p) && !strings.Contains(given, p) {
			t.Errorf("%s: the message shows host path %s: %s", what, p, eb.Message)
		}
	}
}

// Issue 12, bad input: what the runtime's JSON parser refuses is the
// caller's error (400 naming event), as are bundles, env values and
// interpreters that could never work or would expose the host; nothing is
// left behind.
func TestBadInputIs400(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(writeFunction(t, map[string]string{
		"zygo.toml": "name = \"ev\"\nruntime = \"python\"\nhandler = \"main:handler\"\n",
		"main.py":   "def handler(event, context):\n    return 'handler ran'\n",
	}))
	t.Run("events", func(t *testing.T) {
		for what, event := range map[string]string{
			"deep nesting":       strings.Repeat("[", 5000) + strings.Repeat("]", 5000), // Go accepts, Python refuses
			"5000-digit integer": strings.Repeat("7", 5000),
			"invalid UTF-8":      "\"\xff\xfe\"",
		} {
			status, eb := post(t, d, "/v1/functions/ev/invoke", []byte(event))
			checkBadRequest(t, d, what, status, eb, "event", event)
		}
		// Past Go's own limit the daemon refuses it before a runtime sees it, as a runtime would
		// (bad_event), saying how deep it is rather than "not valid JSON".
		status, eb := post(t, d, "/v1/functions/ev/invoke", []byte(strings.Repeat("[", 100000)+strings.Repeat("]", 100000)))
		if status != 400 || eb.Code != "bad_event" || !strings.Contains(eb.Message, "nests 100000 levels deep") {
			t.Errorf("100000-deep event: %d %+v, want 400 bad_event naming the depth", status, eb)
		}
		waitUntil(t, 5*time.Second, "request directories removed", func() (bool, string) {
			left := requestDirsLeft(t, d.StateDir)
			return len(left) == 0, strings.Join(left, " ")
		})
		var s string
		d.Invoke("ev", map[string]any{"n": strings.Repeat("7", 4300)}, &s)
	})
	t.Run("bundles", func(t *testing.T) {
		man := [2]string{"zygo.toml", "name = \"tarbad\"\nruntime = \"python\"\nhandler = \"main:handler\"\n"}
		for what, files := range map[string][][2]string{
			"file/dir clash": {man, {"main.py", "x"}, {"lib", "a"}, {"lib/b.py", "b"}},
			"long path":      {man, {"main.py", "x"}, {strings.Repeat("d/", 600) + "x.py", "x"}},
			"long name":      {man, {"main.py", "x"}, {strings.Repeat("n", 300), "x"}},
		} {
			status, eb := post(t, d, "/v1/functions", rawTarGz(t, files))
			checkBadRequest(t, d, what, status, eb, "bundle entry", "")
		}
	})
	t.Run("manifests", func(t *testing.T) {
		python := filepath.Join(d.StateDir, "py", "bin", "python3")
		elf, err := os.ReadFile("/usr/bin/python3")
		if err != nil {
			t.Fatal("/usr/bin/python3 is needed: apt-get install -y python3")
		}
		os.MkdirAll(filepath.Dir(python), 0o755)
		if err := os.WriteFile(python, elf, 0o755); err != nil {
			t.Fatal(err)
		}
		// A venv in a directory of /tmp its group may write: another user could swap it.
		shared, err := os.MkdirTemp("/tmp", "zygo-e2e-shared-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(shared) })
		sharedPy := filepath.Join(shared, "venv", "bin", "python")
		os.MkdirAll(filepath.Dir(sharedPy), 0o755)
		if err := os.WriteFile(sharedPy, elf, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(shared, 0o775)
		base := "name = \"manbad\"\nruntime = \"python\"\nhandler = \"main:handler\"\n"
		for what, c := range map[string]struct{ extra, field string }{
			"env NUL":                      {"[env]\nA = \"x\\u0000y\"\n", "env.A"},
			"env too long":                 {"[env]\nA = \"" + strings.Repeat("v", 40<<10) + "\"\n", "env.A"},
			"interpreter a directory":      {"interpreter = \"/etc\"\n", "interpreter"},
			"interpreter not executable":   {"interpreter = \"/etc/passwd\"\n", "interpreter"},
			"interpreter a script":         {"interpreter = \"/usr/bin/ldd\"\n", "interpreter"},
			"interpreter in the state dir": {"interpreter = \"" + python + "\"\n", "interpreter"},
			"interpreter not python":       {"interpreter = \"/bin/sh\"\n", "interpreter"},
			"interpreter in /tmp, shared":  {"interpreter = \"" + sharedPy + "\"\n", "interpreter"},
			"interpreter missing in /tmp":  {"interpreter = \"/tmp/python3\"\n", "interpreter"},
			"python_path outside":          {"python_path = [\"../lib\"]\n", "python_path[0]"},
			"python_path not in bundle":    {"python_path = [\"vendor\"]\n", "python_path[0]"},
			"PYTHONPATH has NUL":           {"[env]\nPYTHONPATH = \"a\\u0000b\"\n", "env.PYTHONPATH"},
		} {
			manifest := base + c.extra
			var buf bytes.Buffer
			if err := function.PackDir(writeFunction(t, map[string]string{"zygo.toml": manifest, "main.py": "def handler(e, c): return 1\n"}), &buf); err != nil {
				t.Fatal(err)
			}
			status, eb := post(t, d, "/v1/functions", buf.Bytes())
			checkBadRequest(t, d, what, status, eb, c.field, manifest)
		}
	})
	for _, name := range []string{"tarbad", "manbad"} {
		if left := dirNames(filepath.Join(d.StateDir, "versions", name)); left != nil {
			t.Errorf("a refused deploy of %s left %v", name, left)
		}
		if out, _, _ := d.CLI("ls"); strings.Contains(out, name) {
			t.Errorf("a refused deploy of %s is listed:\n%s", name, out)
		}
	}
}

// Issue 12.1 (locks): one function's slow import does not hold up another
// function's deploy; deploys of one name still wait for each other.
func TestDeployIsNotBlockedByAnotherFunctionsImport(t *testing.T) {
	d := startDaemon(t, "")
	slow := writeFunction(t, map[string]string{
		"zygo.toml": "name = \"slow\"\nruntime = \"python\"\nhandler = \"main:handler\"\n",
		"main.py":   "import time\ntime.sleep(20)\ndef handler(event, context):\n    return 'slow'\n",
	})
	slowDone := make(chan string, 1)
	go func() {
		out, errOut, code := d.CLI("up", slow)
		slowDone <- fmt.Sprintf("exit %d %s %s", code, out, errOut)
	}()
	// The slow import has begun once its zygote's run directory exists.
	waitUntil(t, 10*time.Second, "the slow import to start", func() (bool, string) {
		left := dirNames(filepath.Join(d.StateDir, "run"))
		return len(left) == 1, strings.Join(left, " ")
	})
	d.Up(writeFunction(t, map[string]string{
		"zygo.toml": "name = \"quick\"\nruntime = \"python\"\nhandler = \"main:handler\"\n",
		"main.py":   "def handler(event, context):\n    return 'quick'\n",
	}))
	select {
	case res := <-slowDone:
		t.Fatalf("the quick deploy finished only after the slow import (%s)", res)
	default:
	}
	var s string
	d.Invoke("quick", map[string]any{}, &s)
	if res := <-slowDone; !strings.HasPrefix(res, "exit 0") {
		t.Fatalf("slow deploy: %s", res)
	}
}

// TestEventInlineOrByFile: an event of up to 32 KiB reaches the handler in the
// go message (no event.json in its request directory), a larger one as
// event.json (docs/protocol.md, step 5); either way the handler gets the same
// document, byte for byte once decoded, whatever newlines and quotes it holds.
func TestEventInlineOrByFile(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(writeFunction(t, map[string]string{
		"zygo.toml": "name = \"echo\"\nruntime = \"python\"\nhandler = \"main:handler\"\n",
		"main.py": `import hashlib, json, os
def handler(event, context):
    reqdir = os.path.dirname(os.environ["TMPDIR"])
    return {"sha": hashlib.sha256(json.dumps(event, sort_keys=True).encode()).hexdigest(),
            "file": os.path.exists(os.path.join(reqdir, "event.json"))}
`,
	}))
	const inline = 32 << 10
	for _, c := range []struct {
		size int
		file bool
	}{{100, false}, {inline, false}, {inline + 1, true}, {200 << 10, true}} {
		// {"s":"...","t":"a\n\"b"} padded to exactly c.size bytes of JSON, with a raw
		// newline between members.
		fixed := len("{\"s\":\"\",\n\"t\":\"a\\n\\\"b\"}")
		body := "{\"s\":\"" + strings.Repeat("x", c.size-fixed) + "\",\n\"t\":\"a\\n\\\"b\"}"
		if len(body) != c.size {
			t.Fatalf("built %d bytes, want %d", len(body), c.size)
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(body), &doc); err != nil {
			t.Fatal(err)
		}
		var got struct {
			SHA  string `json:"sha"`
			File bool   `json:"file"`
		}
		resp, err := unixHTTP(d).Post("http://zygo/v1/functions/echo/invoke", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || json.Unmarshal(raw, &got) != nil {
			t.Fatalf("%d-byte event: %d %s", c.size, resp.StatusCode, raw)
		}
		// Python's json.dumps(sort_keys=True) of the same document, computed here.
		want := sha256.Sum256([]byte(fmt.Sprintf("{\"s\": %q, \"t\": \"a\\n\\\"b\"}", doc["s"])))
		if got.SHA != hex.EncodeToString(want[:]) || got.File != c.file {
			t.Errorf("%d-byte event: handler saw sha %s (want %x), event.json present %v (want %v)",
				c.size, got.SHA, want, got.File, c.file)
		}
	}
}
