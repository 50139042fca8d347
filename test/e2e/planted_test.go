package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// TestPlantedFilesInTheRequestDir: a handler replaces result.json, stdout or
// stderr in its own request directory (owned by the sandbox uid) with a
// symlink to a host file, a symlink to /etc/shadow, a FIFO, a hard link, a
// directory or a 1 TiB sparse file, or renames a valid result of its own onto
// result.json and goes on running. The root daemon must follow none of
// them, block on none, read none past its bound: every request answers
// with a clear outcome, no line of /etc/shadow and no host file's marker
// reaches a response, the logs or the daemon's log, and afterwards no
// request dir or request cgroup is left (the lingering process killed past
// its deadline, its request released) and the zygote serves the next
// request. (Device nodes cannot be made in the sandbox; the unit tests in
// internal/agentproc plant those.)
func TestPlantedFilesInTheRequestDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test reads /etc/shadow to look for it in the logs and must run as root (CI does)")
	}
	shadow := shadowLines(t)
	marker := fmt.Sprintf("ZYGO-HOST-MARKER-%d", time.Now().UnixNano())
	hostFile := filepath.Join(t.TempDir(), "host-file")
	// Valid JSON, so that a daemon following the link would return it.
	if err := os.WriteFile(hostFile, []byte(`{"ok": true, "value": "`+marker+`"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "")
	d.Up(fixture("planter"))

	kinds := []struct {
		name  string
		event map[string]any
	}{
		{"symlink to a host file", map[string]any{"kind": "symlink", "target": hostFile}},
		{"symlink to /etc/shadow", map[string]any{"kind": "symlink", "target": "/etc/shadow"}},
		{"fifo", map[string]any{"kind": "fifo"}},
		{"hard link", map[string]any{"kind": "hardlink"}},
		{"directory", map[string]any{"kind": "directory"}},
		{"huge sparse file", map[string]any{"kind": "sparse"}},
		{"result renamed early", map[string]any{"kind": "result"}},
	}
	var seen []string // every response and error message
	for _, at := range []string{"result.json", "stdout", "stderr"} {
		for _, k := range kinds {
			t.Run(at+"/"+strings.ReplaceAll(k.name, " ", "_"), func(t *testing.T) {
				ev := map[string]any{"at": at}
				for key, v := range k.event {
					ev[key] = v
				}
				// TryInvoke gives up after 60 s: a hang, far past the 5 s timeout.
				res, err := d.TryInvoke("planter", ev)
				if err == nil {
					seen = append(seen, string(res.Value))
				}
				var ae *zygo.Error
				if err != nil && !errors.As(err, &ae) {
					t.Fatalf("no answer (the daemon is stuck on the plant?): %v", err)
				}
				if ae != nil {
					seen = append(seen, ae.Message, ae.Traceback)
				}
				switch {
				case at != "result.json":
					// The handler returned; what it did to its logs is its loss.
					if err != nil {
						t.Fatalf("planting at %s failed the request: %v", at, err)
					}
				case k.name == "result renamed early":
					// The daemon answers with it at once; the process lingers and is
					// killed past the deadline (checked below: nothing is left).
					if err != nil || string(res.Value) != `"answered-early"` {
						t.Fatalf("a result renamed early: got value %s, error %v; want it answered", res.Value, err)
					}
				case k.name == "huge sparse file":
					if ae == nil || ae.Code != "response_too_large" {
						t.Fatalf("a 1 TiB result.json: got %v, want response_too_large", err)
					}
				default:
					if ae == nil || ae.Code != "crashed" || !strings.Contains(ae.Message, "not a regular file") {
						t.Fatalf("a %s at result.json: got value %v, error %v; want crashed, saying it is not a regular file", k.name, res, err)
					}
				}
			})
		}
	}
	seen = append(seen, d.Logs("planter", "")...)
	seen = append(seen, d.Log.String())
	all := strings.Join(seen, "\n")
	if strings.Contains(all, marker) {
		t.Errorf("the host file's marker reached a response or the logs")
	}
	for _, l := range shadow {
		if strings.Contains(all, l) {
			t.Errorf("a line of /etc/shadow reached a response or the logs")
			break
		}
	}
	if !strings.Contains(all, "stdout is not a regular file") || !strings.Contains(all, "stderr is not a regular file") {
		t.Errorf("the logs do not say that a planted stdout/stderr was not read")
	}

	// The zygote still serves, and nothing of the planted requests is left.
	var v string
	d.Invoke("planter", map[string]any{"kind": "none"}, &v)
	// A pre-forked child waits for its request in its request group (held): a group whose one
	// process is an idle child of the zygote is not a leftover; anything else is.
	out, _, code := d.CLI("ls", "-o", "json")
	var fns []struct {
		Name      string `json:"name"`
		ZygotePID int    `json:"zygote_pid"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &fns) != nil || len(fns) != 1 || fns[0].ZygotePID == 0 {
		t.Fatalf("zygo ls -o json: exit %d, %q", code, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		dirs, groups := requestDirsLeft(t, d.StateDir), requestCgroupsLeft(t, d.StateDir)
		groups = slices.DeleteFunc(groups, func(g string) bool { return heldByAnIdleChild(g, fns[0].ZygotePID) })
		if len(dirs) == 0 && len(groups) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left after the requests ended: request dirs %v, request cgroups %v", dirs, groups)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// heldByAnIdleChild reports whether the request cgroup dir g holds exactly one process, a
// child of the zygote zygotePID (a pre-forked child waiting for its request).
func heldByAnIdleChild(g string, zygotePID int) bool {
	procs, err := os.ReadFile(filepath.Join(g, "cgroup.procs"))
	pids := strings.Fields(string(procs))
	if err != nil || len(pids) != 1 {
		return false
	}
	status, err := os.ReadFile("/proc/" + pids[0] + "/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "PPid:"); ok {
			return strings.TrimSpace(v) == strconv.Itoa(zygotePID)
		}
	}
	return false
}

// shadowLines returns the non-empty lines of /etc/shadow.
func shadowLines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/etc/shadow")
	if err != nil {
		t.Fatalf("reading /etc/shadow: %v", err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// requestCgroupsLeft lists the request cgroups below the daemon's parent
// group (zygo/HASH of its state dir, internal/daemon), under any
// controller, that still hold a process: what a request left behind. An
// empty one is a group kept for the next request (internal/cgroup
// PlacePooled), not a leftover. It fails the test when the parent is
// nowhere, since then nothing was checked.
func requestCgroupsLeft(t *testing.T, stateDir string) []string {
	t.Helper()
	sum := sha256.Sum256([]byte(stateDir))
	parent := "zygo/" + hex.EncodeToString(sum[:6])
	parents, _ := filepath.Glob("/sys/fs/cgroup/*/" + parent)
	if p := "/sys/fs/cgroup/" + parent; dirExists(p) {
		parents = append(parents, p)
	}
	if len(parents) == 0 {
		t.Fatalf("no cgroup %s under /sys/fs/cgroup: the daemon made no request cgroups to check", parent)
	}
	var left []string
	for _, r := range parents {
		_ = filepath.WalkDir(r, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() && p != r {
				// FUNCTION/REQUEST; FUNCTION/z-… is the running zygote's own group, not a request's.
				rel, _ := filepath.Rel(r, p)
				procs, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
				if strings.Count(rel, "/") >= 1 && !strings.HasPrefix(filepath.Base(p), "z-") && len(strings.TrimSpace(string(procs))) > 0 {
					left = append(left, p)
				}
			}
			return nil
		})
	}
	return left
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
