package e2esandbox

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/test/e2eutil"
)

var genRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// generation returns `zygo sandbox generation ID` and checks it is what the sandbox itself
// publishes at /run/zygo/generation.
func generation(t *testing.T, d *Daemon, id string) string {
	t.Helper()
	g := d.OK("sandbox", "generation", id)
	if !genRE.MatchString(g) {
		t.Fatalf("generation of %s is %q, want 32 hex digits", id, g)
	}
	if inside := d.OK("sandbox", "exec", id, "--", "cat", "/run/zygo/generation"); inside != g {
		t.Errorf("%s: zygo sandbox generation says %s, /run/zygo/generation inside says %s", id, g, inside)
	}
	return g
}

// TestSandboxLifecycle is issue 4's walk through the CLI: create; write a file; run-code
// "x = 41"; checkpoint; restart the daemon in the middle (a running sandbox is adopted, one
// whose engine died is marked dead); fork 3, where every child sees the file and x == 41 and
// has its own generation; a change in one child is seen by nobody else; rollback brings back
// the checkpoint's file with a new generation each time; a referenced checkpoint is not
// removed; rm leaves no container, process, instance dir or image.
func TestSandboxLifecycle(t *testing.T) {
	d := startDaemon(t)
	src := d.OK("sandbox", "create", "--name", "src")
	if !strings.HasPrefix(src, "sb-") {
		t.Fatalf("create printed %q, want a sandbox id", src)
	}
	if _, _, code := d.CLIIn("v1", "sandbox", "files", "put", "src", "-", "/root/data.txt"); code != 0 {
		t.Fatal("files put failed")
	}
	if got := d.OK("sandbox", "files", "get", "src", "/root/data.txt"); got != "v1" {
		t.Fatalf("files get: %q", got)
	}
	if ls := d.OK("sandbox", "files", "ls", "src", "/root"); !strings.Contains(ls, "data.txt") {
		t.Errorf("files ls /root: %q", ls)
	}
	d.OK("sandbox", "run-code", "src", "--code", "x = 41")
	if v := d.OK("sandbox", "run-code", "src", "--code", "x"); v != "41" {
		t.Fatalf("x in src: %q", v)
	}
	srcGen := generation(t, d, src)

	cp := d.OK("sandbox", "checkpoint", "src", "--tag", "base")
	if !strings.HasPrefix(cp, "cp-") {
		t.Fatalf("checkpoint printed %q, want a checkpoint id", cp)
	}
	if cps := d.OK("sandbox", "checkpoints", "src"); !strings.Contains(cps, cp) || !strings.Contains(cps, "base") {
		t.Errorf("checkpoints src does not list %s:\n%s", cp, cps)
	}

	restartInTheMiddle(t, d, src)

	// Fork 3 from the checkpoint: every child sees the file and x, with its own generation.
	out, errOut, code := d.CLI("sandbox", "fork", "src", "-n", "3", "--from", "base")
	kids := lines(out)
	if code != 0 || len(kids) != 3 {
		t.Fatalf("fork -n 3: exit %d, children %q\nstderr: %s", code, kids, errOut)
	}
	gens := map[string]string{src: srcGen}
	for _, k := range kids {
		rec := d.Record(k)
		if rec.ParentID != src || rec.CheckpointID != cp || rec.State != "running" {
			t.Errorf("child record %+v", rec)
		}
		if got := d.OK("sandbox", "files", "get", k, "/root/data.txt"); got != "v1" {
			t.Errorf("child %s sees file %q, want v1", k, got)
		}
		if v := d.OK("sandbox", "run-code", k, "--code", "x"); v != "41" {
			t.Errorf("child %s sees x = %s, want 41", k, v)
		}
		g := generation(t, d, k)
		for other, og := range gens {
			if og == g {
				t.Errorf("child %s has the generation of %s: %s", k, other, g)
			}
		}
		gens[k] = g
	}

	// A change in one child is seen by neither its siblings nor the parent.
	d.CLIIn("child0", "sandbox", "files", "put", kids[0], "-", "/root/data.txt")
	d.OK("sandbox", "run-code", kids[0], "--code", "x = 99")
	for _, id := range []string{src, kids[1], kids[2]} {
		if got := d.OK("sandbox", "files", "get", id, "/root/data.txt"); got != "v1" {
			t.Errorf("%s sees %q after child 0 wrote", id, got)
		}
		if v := d.OK("sandbox", "run-code", id, "--code", "x"); v != "41" {
			t.Errorf("%s sees x = %s after child 0 changed it", id, v)
		}
	}

	// Rollback brings back the checkpoint's file; each rollback is a new generation.
	d.CLIIn("v2", "sandbox", "files", "put", "src", "-", "/root/data.txt")
	for i := range 2 {
		d.OK("sandbox", "rollback", "src", "--to", cp)
		if got := d.OK("sandbox", "files", "get", "src", "/root/data.txt"); got != "v1" {
			t.Errorf("rollback %d: file %q, want the checkpoint's v1", i, got)
		}
		if rec := d.Record("src"); rec.ID != src || rec.CheckpointID != cp {
			t.Errorf("rollback %d: record %+v (the id must stay)", i, rec)
		}
		g := generation(t, d, src)
		for other, og := range gens {
			if og == g {
				t.Errorf("rollback %d reused the generation of %s", i, other)
			}
		}
		gens["rollback"+string(rune('0'+i))] = g
		d.CLIIn("v3", "sandbox", "files", "put", "src", "-", "/root/data.txt")
	}

	// The checkpoint is referenced by the children and src: removing it is refused, clearly.
	if msg := d.Fails("sandbox", "checkpoints", "rm", cp); !strings.Contains(msg, "still referenced") || !strings.Contains(msg, kids[0]) {
		t.Errorf("removing a referenced checkpoint: %q", msg)
	}

	// A checkpoint of a child descends from cp; a relative path is refused without HTTP syntax.
	kidCP := d.OK("sandbox", "checkpoint", kids[0])
	if msg := d.Fails("sandbox", "files", "get", src, "notes.txt"); !strings.Contains(msg, "path") || strings.Contains(msg, "?path") {
		t.Errorf("files get of a relative path: %q", msg)
	}

	// rm leaves nothing behind.
	for _, id := range append(kids, src) {
		d.OK("sandbox", "rm", id)
	}
	if recs := d.Sandboxes(); len(recs) != 0 {
		t.Errorf("sandboxes left after rm: %+v", recs)
	}
	if c := d.Containers(); len(c) != 0 {
		t.Errorf("runsc containers left after rm: %v", c)
	}
	if p := d.engineProcesses(); len(p) != 0 {
		t.Errorf("engine processes left after rm: %v", p)
	}
	if left := dirEntries(t, filepath.Join(d.EngineDir(), "instances")); len(left) != 0 {
		t.Errorf("instance dirs left after rm: %v", left)
	}
	// Parent first on the command line: removed children first, so both go.
	d.OK("sandbox", "checkpoints", "rm", "base", kidCP)
	if left := dirEntries(t, filepath.Join(d.StateDir, "images")); len(left) != 0 {
		t.Errorf("image dirs left after removing the checkpoint: %v", left)
	}
	d.Stop()
	if m := e2eutil.MountsUnder(d.StateDir); len(m) != 0 {
		t.Errorf("mounts left after rm and daemon stop: %v", m)
	}
}

// restartInTheMiddle stops the daemon with src running and a second sandbox whose engine is
// then killed behind its back, starts it again, and checks src was adopted (it answers, with
// its state) and the dead one is marked dead and removable.
func restartInTheMiddle(t *testing.T, d *Daemon, src string) {
	t.Helper()
	victim := d.OK("sandbox", "create", "--name", "victim")
	engine := d.Record(victim).EngineID
	d.Stop()
	if out, err := exec.Command(d.Runsc, "--root="+filepath.Join(d.EngineDir(), "runsc"), "delete", "--force", engine).CombinedOutput(); err != nil {
		t.Fatalf("killing the victim's container: %v\n%s", err, out)
	}
	d.Start()
	// Recovery runs in the background: the API serves at once, the report follows.
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(d.Log(), "sandboxes recovered"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not report recovery:\n%s", tail(d.Log(), 20))
		}
	}
	if !strings.Contains(d.Log(), "adopted=1") || !strings.Contains(d.Log(), "dead=1") {
		t.Errorf("the daemon did not report recovery (adopted=1 dead=1):\n%s", tail(d.Log(), 20))
	}
	if v := d.OK("sandbox", "run-code", src, "--code", "x"); v != "41" {
		t.Errorf("after the restart x = %s in src, want 41", v)
	}
	if got := d.OK("sandbox", "files", "get", src, "/root/data.txt"); got != "v1" {
		t.Errorf("after the restart src sees %q", got)
	}
	rec := d.Record(victim)
	if rec.State != "dead" || rec.Error == "" {
		t.Errorf("victim after its engine died: state %s error %q, want dead with a cause", rec.State, rec.Error)
	}
	if msg := d.Fails("sandbox", "exec", victim, "--", "true"); !strings.Contains(msg, "dead") ||
		!strings.Contains(msg, "(zygo sandbox rm "+victim+" removes it)") {
		t.Errorf("exec in a dead sandbox: %q", msg)
	}
	d.OK("sandbox", "rm", victim)
	if slices.Contains(d.Containers(), engine) {
		t.Errorf("the victim's container is still listed")
	}
}
