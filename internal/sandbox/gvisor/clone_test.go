package gvisor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// The CLONE-N harness of shared/cases/fork-safety-cases.md on the Manager and real runsc: a
// program runs as a long-lived process inside a sandbox; when it prints "ready" the sandbox is
// checkpointed; N copies are restored from that checkpoint; one line is written to each copy's
// stdin and its stdout is collected.
//
// Inside the sandbox a program NAME reads /tmp/clone/NAME.in (a FIFO it holds open read-write,
// so it never sees EOF) and writes /tmp/clone/NAME.out and NAME.err. Both files live in the
// sandbox's in-memory root, so they are part of the checkpoint and every copy has its own.

const cloneDir = "/tmp/clone"

// proc is one long-lived program.
type proc struct {
	name string
	argv []string
	env  []string // added to the sandbox's environment
}

// shq quotes s for /bin/sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func shJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shq(a)
	}
	return strings.Join(q, " ")
}

// start starts p in sandbox id, in its own session, detached from the exec call.
func (h *harness) start(t testing.TB, id string, p proc) {
	t.Helper()
	base := cloneDir + "/" + p.name
	cmd := "env " + shJoin(append(append([]string{}, p.env...), p.argv...))
	h.sh(t, id, "mkdir -p "+cloneDir+" && mkfifo "+base+".in && setsid -f "+cmd+
		" <>"+base+".in >"+base+".out 2>"+base+".err")
}

// out returns what p wrote to stdout in sandbox id so far ("" before it wrote anything).
func (h *harness) out(t testing.TB, id, name string) string {
	t.Helper()
	var b bytes.Buffer
	if err := h.m.GetFile(tctx(t), id, cloneDir+"/"+name+".out", &b); err != nil {
		return ""
	}
	return b.String()
}

// waitOut polls p's stdout in sandbox id until ok accepts it, and returns it. On timeout it
// fails the test with p's stdout and stderr.
func (h *harness) waitOut(t testing.TB, id, name string, timeout time.Duration, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		o := h.out(t, id, name)
		if ok(o) {
			return o
		}
		if time.Now().After(deadline) {
			var e bytes.Buffer
			_ = h.m.GetFile(tctx(t), id, cloneDir+"/"+name+".err", &e)
			t.Fatalf("%s in %s: timed out after %v\nstdout:\n%s\nstderr:\n%s", name, id, timeout, o, e.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitReady waits for the program's "ready" line (on stdout, or on stderr for programs whose
// stdout must stay unflushed).
func (h *harness) waitReady(t testing.TB, id, name string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var e bytes.Buffer
		_ = h.m.GetFile(tctx(t), id, cloneDir+"/"+name+".err", &e)
		if strings.Contains(h.out(t, id, name)+e.String(), "ready\n") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s in %s never said ready\nstdout:\n%s\nstderr:\n%s", name, id, h.out(t, id, name), e.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// poke writes one line to p's stdin in sandbox id.
func (h *harness) poke(t testing.TB, id, name, line string) {
	t.Helper()
	h.sh(t, id, "printf '%s\\n' "+shq(line)+" > "+cloneDir+"/"+name+".in")
}

// jsonLines returns the lines of s that are JSON objects, decoded.
func jsonLines(s string) []map[string]json.RawMessage {
	var out []map[string]json.RawMessage
	for _, l := range strings.Split(s, "\n") {
		var m map[string]json.RawMessage
		if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// report pokes p with line and returns the first JSON line it answers with (a program
// answers one JSON line per line on stdin, after the copy's earlier output).
func (h *harness) report(t testing.TB, id, name, line string) map[string]json.RawMessage {
	t.Helper()
	before := len(jsonLines(h.out(t, id, name)))
	h.poke(t, id, name, line)
	o := h.waitOut(t, id, name, 30*time.Second, func(s string) bool { return len(jsonLines(s)) > before })
	return jsonLines(o)[before]
}

// str decodes a JSON value to a string: strings as themselves, anything else as its JSON.
func str(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	return string(v)
}

// repoRoot is the repository's root directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// putTree copies the regular files under host directory src to dir inside sandbox id.
func (h *harness) putTree(t testing.TB, id, src, dir string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.Contains(p, "__pycache__") {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return h.m.PutFile(tctx(t), id, filepath.Join(dir, rel), 0o644, bytes.NewReader(b))
	})
	if err != nil {
		t.Fatalf("putting %s in %s: %v", src, id, err)
	}
}

// forkN forks n children of src from checkpoint cp and fails the test unless all run and the
// fork reported its progress: once for the checkpoint, then once per child, counting up.
func (h *harness) forkN(t testing.TB, src string, cp sandbox.CheckpointRecord, n int) []sandbox.SandboxRecord {
	t.Helper()
	var prog []sandbox.ForkProgress
	res, err := h.m.Fork(tctx(t), src, sandbox.ForkOptions{N: n, From: cp.ID,
		Progress: func(p sandbox.ForkProgress) { prog = append(prog, p) }})
	if err != nil {
		t.Fatalf("Fork %d: %v", n, err)
	}
	for i, p := range prog {
		if p.Ready != i || p.Failed != 0 || p.N != n || p.Checkpoint != cp.ID {
			t.Errorf("progress event %d of a fork of %d from %s: %+v", i, n, cp.ID, p)
		}
	}
	if len(prog) != n+1 {
		t.Errorf("fork of %d reported progress %d times, want %d", n, len(prog), n+1)
	}
	var kids []sandbox.SandboxRecord
	for i, c := range res.Children {
		if c.Err != nil {
			t.Fatalf("child %d: %v", i, c.Err)
		}
		kids = append(kids, c.Sandbox)
	}
	return kids
}

// distinct fails the test unless the values are pairwise distinct; what names them in errors.
func distinct(t testing.TB, what string, vals map[string]string) {
	t.Helper()
	seen := map[string]string{}
	for who, v := range vals {
		if other, ok := seen[v]; ok {
			t.Errorf("%s: %s and %s both have %q", what, other, who, v)
		}
		seen[v] = who
	}
}

// runCode runs src in id's interpreter and returns its value; a Python exception fails t.
func (h *harness) runCode(t testing.TB, ctx context.Context, id, src string) (string, string) {
	t.Helper()
	var out bytes.Buffer
	res, err := h.m.RunCode(ctx, id, guest.CodeRequest{Code: src}, &out, &out)
	if err != nil || !res.OK {
		t.Fatalf("run-code %q in %s: %+v %v\n%s", src, id, res, err, out.String())
	}
	return res.Value, out.String()
}
