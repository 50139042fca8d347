package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/sandboxtest"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// newInputServer serves the sandbox routes of a real Manager on sandboxtest.FakeBackend, whose
// images and protected dirs are under state (a /tmp/zygo-state-… dir), with one sandbox "sb"
// and one checkpoint of it tagged "base".
func newInputServer(t *testing.T) (ts *httptest.Server, m *sandbox.Manager, be *sandboxtest.FakeBackend, state string) {
	t.Helper()
	ctx := context.Background()
	state, err := os.MkdirTemp("/tmp", "zygo-state-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	be = sandboxtest.NewFakeBackend(t)
	m, err = sandbox.NewManager(sandbox.ManagerConfig{Backend: be, Registry: sandbox.NewMemRegistry(),
		ImageDir: filepath.Join(state, "images"), ProtectedDirs: []string{state}, Reseal: sandboxtest.FakeReseal,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	srv := NewServer(nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), "test").WithSandboxes(m, nil)
	ts = httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	if _, err := m.Create(ctx, sandbox.CreateOptions{Name: "sb"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Checkpoint(ctx, "sb", "base"); err != nil {
		t.Fatal(err)
	}
	return ts, m, be, state
}

// TestSandboxBadInputIs400: every malformed input of the sandbox routes — paths (NUL, empty,
// relative, over PATH_MAX, a component over NAME_MAX), env and argv (NUL, empty, too many, too
// long), services, names, tags, fork n, limits, rootfs_dir, checkpoint and sandbox references,
// JSON with unknown fields or wrong types — is refused with 400 (404 for a well-formed id that
// names nothing), with a message that names the field and holds no host path of the daemon's;
// nothing is left behind. It runs the real Manager on sandboxtest.FakeBackend (real guest
// agents), so a check the Manager lacks reaches the guest and shows as its 500/503.
func TestSandboxBadInputIs400(t *testing.T) {
	ctx := context.Background()
	ts, m, be, state := newInputServer(t)
	images := filepath.Join(state, "images")
	sb, err := m.Get(ctx, "sb")
	if err != nil {
		t.Fatal(err)
	}

	long := func(n int) string { return strings.Repeat("a", n) }
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	q := url.QueryEscape
	manyArgs := make([]string, sandbox.MaxArgs+1)
	for i := range manyArgs {
		manyArgs[i] = "x"
	}
	const unknownCP = "cp-0123456789abcdef"
	cases := []struct {
		name, method, path, body string
		status                   int
		field                    string // the message must name it
	}{
		// create
		{"name charset", "POST", "/v1/sandboxes", `{"name":"a b"}`, 400, "name"},
		{"name too long", "POST", "/v1/sandboxes", js(map[string]string{"name": long(64)}), 400, "name"},
		{"name NUL", "POST", "/v1/sandboxes", `{"name":"a\u0000b"}`, 400, "name"},
		{"rootfs relative", "POST", "/v1/sandboxes", `{"rootfs_dir":"rel/dir"}`, 400, "rootfs_dir"},
		{"rootfs NUL", "POST", "/v1/sandboxes", `{"rootfs_dir":"/srv/a\u0000b"}`, 400, "rootfs_dir"},
		{"rootfs over PATH_MAX", "POST", "/v1/sandboxes", js(map[string]string{"rootfs_dir": "/" + strings.Repeat("d/", 2100)}), 400, "rootfs_dir"},
		{"rootfs component over NAME_MAX", "POST", "/v1/sandboxes", js(map[string]string{"rootfs_dir": "/" + long(256)}), 400, "rootfs_dir"},
		{"rootfs missing", "POST", "/v1/sandboxes", `{"rootfs_dir":"/nonexistent/zygo-root"}`, 400, "rootfs_dir"},
		{"rootfs is the state dir", "POST", "/v1/sandboxes", js(map[string]string{"rootfs_dir": state}), 400, "rootfs_dir"},
		{"rootfs inside the state dir", "POST", "/v1/sandboxes", js(map[string]string{"rootfs_dir": images}), 400, "rootfs_dir"},
		{"rootfs missing inside the state dir", "POST", "/v1/sandboxes", js(map[string]string{"rootfs_dir": filepath.Join(state, "nosuch")}), 400, "overlaps"},
		{"env NUL in key", "POST", "/v1/sandboxes", `{"env":["A\u0000B=1"]}`, 400, "env[0]"},
		{"env NUL in value", "POST", "/v1/sandboxes", `{"env":["A=1","B=x\u0000y"]}`, 400, "env[1]"},
		{"env no key", "POST", "/v1/sandboxes", `{"env":["=1"]}`, 400, "env[0]"},
		{"env too long", "POST", "/v1/sandboxes", js(map[string][]string{"env": {"A=" + long(sandbox.MaxArgBytes)}}), 400, "env[0]"},
		{"service no argv", "POST", "/v1/sandboxes", `{"services":[{"name":"web","argv":[]}]}`, 400, "services[0].argv"},
		{"service NUL argv", "POST", "/v1/sandboxes", `{"services":[{"name":"web","argv":["/bin/x\u0000"]}]}`, 400, "services[0].argv[0]"},
		{"service bad name", "POST", "/v1/sandboxes", `{"services":[{"name":"a/b","argv":["x"]}]}`, 400, "services[0].name"},
		{"service env NUL", "POST", "/v1/sandboxes", `{"services":[{"name":"web","argv":["x"],"env":["A=\u0000"]}]}`, 400, "services[0].env[0]"},
		{"service policy", "POST", "/v1/sandboxes", `{"services":[{"name":"web","argv":["x"],"on_fork":"reboot"}]}`, 400, "on_fork"},
		{"secret name", "POST", "/v1/sandboxes", `{"secrets":["../key"]}`, 400, "secrets[0]"},
		{"memory", "POST", "/v1/sandboxes", `{"memory_mib":1}`, 400, "memory_mib"},
		{"pids", "POST", "/v1/sandboxes", `{"pids":1}`, 400, "pids"},
		{"cpus", "POST", "/v1/sandboxes", `{"cpus":-1}`, 400, "cpus"},
		{"unknown field", "POST", "/v1/sandboxes", `{"nmae":"x"}`, 400, "nmae"},
		{"wrong type", "POST", "/v1/sandboxes", `{"memory_mib":"lots"}`, 400, "memory_mib"},
		{"not JSON", "POST", "/v1/sandboxes", `{"name":`, 400, "request body"},
		// exec
		{"argv missing", "POST", "/v1/sandboxes/sb/exec", `{}`, 400, "argv"},
		{"argv empty command", "POST", "/v1/sandboxes/sb/exec", `{"argv":[""]}`, 400, "argv"},
		{"argv NUL", "POST", "/v1/sandboxes/sb/exec", `{"argv":["/bin/echo","a\u0000b"]}`, 400, "argv[1]"},
		{"argv too many", "POST", "/v1/sandboxes/sb/exec", js(map[string][]string{"argv": manyArgs}), 400, "argv"},
		{"argv too long", "POST", "/v1/sandboxes/sb/exec", js(map[string][]string{"argv": {"/bin/echo", long(sandbox.MaxArgBytes + 1)}}), 400, "argv[1]"},
		{"argv and env too big together", "POST", "/v1/sandboxes/sb/exec", js(map[string][]string{"argv": {"/bin/echo", long(sandbox.MaxArgBytes)},
			"env": strings.Split(strings.Repeat("A="+long(sandbox.MaxArgBytes-2)+"\n", 16), "\n")[:16]}), 400, "argv"},
		{"exec env NUL", "POST", "/v1/sandboxes/sb/exec", `{"argv":["/bin/true"],"env":["A=\u0000"]}`, 400, "env[0]"},
		{"exec env no =", "POST", "/v1/sandboxes/sb/exec", `{"argv":["/bin/true"],"env":["A"]}`, 400, "env[0]"},
		{"cwd relative", "POST", "/v1/sandboxes/sb/exec", `{"argv":["/bin/true"],"cwd":"tmp"}`, 400, "cwd"},
		{"cwd NUL", "POST", "/v1/sandboxes/sb/exec", `{"argv":["/bin/true"],"cwd":"/tmp\u0000"}`, 400, "cwd"},
		{"exec timeout negative", "POST", "/v1/sandboxes/sb/exec", `{"argv":["/bin/true"],"timeout_ms":-1}`, 400, "timeout_ms"},
		{"exec timeout overflows", "POST", "/v1/sandboxes/sb/exec", `{"argv":["/bin/true"],"timeout_ms":9223372036854775807}`, 400, "timeout_ms"},
		{"exec argv wrong type", "POST", "/v1/sandboxes/sb/exec", `{"argv":"/bin/true"}`, 400, "argv"},
		{"exec unknown field", "POST", "/v1/sandboxes/sb/exec", `{"argv":["/bin/true"],"shell":true}`, 400, "shell"},
		{"run-code timeout overflows", "POST", "/v1/sandboxes/sb/run-code", `{"code":"1","timeout_ms":9223372036854775807}`, 400, "timeout_ms"},
		// files
		{"get path empty", "GET", "/v1/sandboxes/sb/files?path=", "", 400, "path"},
		{"get path relative", "GET", "/v1/sandboxes/sb/files?path=etc/hostname", "", 400, "path"},
		{"get path NUL", "GET", "/v1/sandboxes/sb/files?path=" + q("/etc/host\x00name"), "", 400, "path"},
		{"get path over PATH_MAX", "GET", "/v1/sandboxes/sb/files?path=" + q("/"+strings.Repeat("d/", 2100)), "", 400, "path"},
		{"get path component over NAME_MAX", "GET", "/v1/sandboxes/sb/files?path=" + q("/"+long(256)), "", 400, "path"},
		{"put path NUL", "PUT", "/v1/sandboxes/sb/files?path=" + q("/tmp/a\x00b"), "x", 400, "path"},
		{"put path component over NAME_MAX", "PUT", "/v1/sandboxes/sb/files?path=" + q("/tmp/"+long(256)), "x", 400, "path"},
		{"put mode", "PUT", "/v1/sandboxes/sb/files?path=/tmp/x&mode=99999", "x", 400, "mode"},
		{"list path NUL", "GET", "/v1/sandboxes/sb/files/list?path=" + q("/\x00"), "", 400, "path"},
		// checkpoints, fork, rollback
		{"tag charset", "POST", "/v1/sandboxes/sb/checkpoint", `{"tag":"a b"}`, 400, "tag"},
		{"tag too long", "POST", "/v1/sandboxes/sb/checkpoint", js(map[string]string{"tag": long(64)}), 400, "tag"},
		{"tag NUL", "POST", "/v1/sandboxes/sb/checkpoint", `{"tag":"a\u0000"}`, 400, "tag"},
		{"fork n zero", "POST", "/v1/sandboxes/sb/fork", `{"n":0}`, 400, "n:"},
		{"fork n too big", "POST", "/v1/sandboxes/sb/fork", `{"n":1000}`, 400, "n:"},
		{"fork n not the number of names", "POST", "/v1/sandboxes/sb/fork", `{"n":3,"names":["q1","q2"]}`, 400, "names"},
		{"fork names without n, one bad", "POST", "/v1/sandboxes/sb/fork", `{"names":["q1","Q 2"]}`, 400, "names[1]"},
		{"fork n wrong type", "POST", "/v1/sandboxes/sb/fork", `{"n":"two"}`, 400, ".n"},
		{"fork from malformed", "POST", "/v1/sandboxes/sb/fork", `{"n":1,"from":"../cp"}`, 400, "from"},
		{"fork from unknown", "POST", "/v1/sandboxes/sb/fork", js(map[string]any{"n": 1, "from": unknownCP}), 404, unknownCP},
		{"rollback to empty", "POST", "/v1/sandboxes/sb/rollback", `{}`, 400, "to"},
		{"rollback to NUL", "POST", "/v1/sandboxes/sb/rollback", `{"to":"base\u0000"}`, 400, "to"},
		{"rollback to unknown", "POST", "/v1/sandboxes/sb/rollback", js(map[string]string{"to": unknownCP}), 404, unknownCP},
		{"get checkpoint malformed", "GET", "/v1/checkpoints/" + url.PathEscape("a b"), "", 400, "checkpoint"},
		{"get checkpoint unknown", "GET", "/v1/checkpoints/" + unknownCP, "", 404, unknownCP},
		{"rm checkpoint malformed", "DELETE", "/v1/checkpoints/" + url.PathEscape(long(64)), "", 400, "checkpoint"},
		{"rm checkpoint NUL", "DELETE", "/v1/checkpoints/" + url.PathEscape("cp\x00"), "", 400, "checkpoint"},
		{"rm checkpoint unknown", "DELETE", "/v1/checkpoints/" + unknownCP, "", 404, unknownCP},
		{"list checkpoints of malformed", "GET", "/v1/checkpoints?sandbox=" + q("a\x00"), "", 400, "sandbox"},
		// routes that take no body refuse one with fields; import refuses unknown parameters
		{"access-token ttl", "POST", "/v1/sandboxes/sb/access-token", `{"ttl":5}`, 400, "ttl"},
		{"access-token not JSON", "POST", "/v1/sandboxes/sb/access-token", `ttl=5`, 400, "request body"},
		{"port unknown field", "POST", "/v1/sandboxes/sb/ports/80", `{"unknown":1}`, 400, "unknown"},
		{"pause unknown field", "POST", "/v1/sandboxes/sb/pause", `{"force":true}`, 400, "force"},
		{"import unknown parameter", "POST", "/v1/checkpoints/import?sha256=" + strings.Repeat("0", 64) + "&bogus=1", "x", 400, "bogus"},
		// sandbox references
		{"sandbox ref NUL", "GET", "/v1/sandboxes/" + url.PathEscape("sb\x00"), "", 400, "sandbox"},
		{"sandbox ref too long", "POST", "/v1/sandboxes/" + long(64) + "/exec", `{"argv":["/bin/true"]}`, 400, "sandbox"},
		{"sandbox unknown", "GET", "/v1/sandboxes/nosuch", "", 404, "nosuch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, msg, raw := call(t, ts, tc.method, tc.path, tc.body)
			if status != tc.status || !strings.Contains(msg, tc.field) {
				t.Errorf("%s %.80s: %d %.300q, want %d naming %q", tc.method, tc.path, status, raw, tc.status, tc.field)
			}
			if strings.Contains(msg, "?") && strings.Contains(msg, "=") { // the CLI prints it as it is
				t.Errorf("%s %.80s: the message has HTTP query syntax: %q", tc.method, tc.path, msg)
			}
			for _, host := range []string{state, "/var/lib/zygo", "/tmp/zygo-", "/tmp/Test"} {
				if strings.Contains(raw, host) {
					t.Errorf("the answer names the host path %s: %.300q", host, raw)
				}
			}
		})
	}

	// Nothing left behind: the one sandbox, its one instance and checkpoint, no stray image.
	if recs, _ := m.List(ctx); len(recs) != 1 || recs[0].ID != sb.ID {
		t.Errorf("sandboxes after the bad calls: %+v", recs)
	}
	if ids, _ := be.List(ctx); len(ids) != 1 {
		t.Errorf("instances after the bad calls: %v", ids)
	}
	if cps, _ := m.Checkpoints(ctx, ""); len(cps) != 1 {
		t.Errorf("checkpoints after the bad calls: %+v", cps)
	}
	if ents, _ := os.ReadDir(images); len(ents) != 1 {
		t.Errorf("image dirs after the bad calls: %v", ents)
	}
	// And good input still works through the same routes.
	for _, good := range []struct{ method, path, body string }{
		{"POST", "/v1/sandboxes/sb/exec", `{"argv":["/bin/true"],"cwd":"/","env":["A=1"]}`},
		{"GET", "/v1/sandboxes/sb/files/list?path=/", ""},
		{"GET", "/v1/checkpoints/base", ""},
	} {
		if status, _, raw := call(t, ts, good.method, good.path, good.body); status != 200 {
			t.Errorf("good %s %s: %d %s", good.method, good.path, status, raw)
		}
	}
}

// call sends one request to ts and returns the status, the error message and the raw answer.
func call(t *testing.T, ts *httptest.Server, method, path, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var eb struct {
		Error wire.ErrorBody `json:"error"`
	}
	_ = json.Unmarshal(raw, &eb)
	return resp.StatusCode, eb.Error.Message, string(raw)
}

// TestForkNamesWithoutN: a fork body with names and no n makes one child per name (as the CLI
// does with --name and no -n), named in order; it was a 400 "n: 0" before.
func TestForkNamesWithoutN(t *testing.T) {
	ts, m, _, _ := newInputServer(t)
	status, _, raw := call(t, ts, "POST", "/v1/sandboxes/sb/fork", `{"names":["q1","q2"],"from":"base"}`)
	if status != http.StatusOK {
		t.Fatalf("fork with names and no n: %d %s", status, raw)
	}
	var ans wire.ForkAnswer
	if err := json.Unmarshal([]byte(raw), &ans); err != nil {
		t.Fatal(err)
	}
	if ans.Succeeded != 2 || len(ans.Children) != 2 || ans.Children[0].Sandbox == nil || ans.Children[1].Sandbox == nil ||
		ans.Children[0].Sandbox.Name != "q1" || ans.Children[1].Sandbox.Name != "q2" {
		t.Fatalf("fork answer %s, want children q1 and q2", raw)
	}
	for _, name := range []string{"q1", "q2"} {
		if _, err := m.Get(context.Background(), name); err != nil {
			t.Errorf("child %s: %v", name, err)
		}
	}
}

// TestMessagesReadOnce: closing a port that is not published, and importing a tar that is not
// an export, answer one sentence each: "not found" once, and the command that makes the tar.
func TestMessagesReadOnce(t *testing.T) {
	ts, m, _, _ := newInputServer(t)
	sb, err := m.Get(context.Background(), "sb")
	if err != nil {
		t.Fatal(err)
	}
	status, msg, raw := call(t, ts, "DELETE", "/v1/sandboxes/sb/ports/8000", "")
	if want := "published port 8000 of sandbox " + sb.ID + " not found"; status != http.StatusNotFound || msg != want {
		t.Errorf("closing an unpublished port: %d %s, want 404 %q", status, raw, want)
	}
	status, msg, raw = call(t, ts, "POST", "/v1/checkpoints/import?sha256="+strings.Repeat("0", 64), "")
	if status != http.StatusBadRequest || !strings.Contains(msg, "`zygo sandbox checkpoints export`") {
		t.Errorf("importing an empty body: %d %s, want 400 naming zygo sandbox checkpoints export", status, raw)
	}
}
