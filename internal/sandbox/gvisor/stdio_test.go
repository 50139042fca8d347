package gvisor_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// listFds prints "LINK TARGET" for every fd of every process but PID 1 (whose fd links are
// refused to others: it is not dumpable), the listing shell included.
const listFds = `for f in /proc/[0-9]*/fd/*; do case $f in /proc/1/*) continue;; esac; ` +
	`t=$(readlink "$f") && echo "$f $t"; done; exit 0`

// In gVisor, readlink of an fd backed by a file the host donated (PID 1's stdio: the
// instance's runsc.log) shows "host:[N]"; a pipe shows "pipe:[N]", a file of the sandbox's
// root its path.
const hostFdMark = "host:["

// TestNoHostFdOutsidePID1: no process of a sandbox but PID 1 holds a descriptor to a host
// file — not a service, not the interpreter nor a process it started, not an exec — in a
// created sandbox and in a fork; and PID 1's own stdio cannot be opened through /proc.
func TestNoHostFdOutsidePID1(t *testing.T) {
	h := newHarness(t, sandbox.DefaultReseal)
	ctx := tctx(t)
	rec, err := h.m.Create(ctx, sandbox.CreateOptions{Services: []guest.Service{
		{Name: "web", Argv: []string{"/bin/sh", "-c", "echo up; exec sleep 1000"}},
		{Name: "child", Argv: []string{"/bin/sh", "-c", "sleep 1000 & wait"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h.code(t, rec.ID, "import subprocess\nbg = subprocess.Popen(['sleep', '1000'])")
	check := func(id string) {
		t.Helper()
		out := h.sh(t, id, listFds)
		pipes := 0
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.Contains(l, hostFdMark) {
				t.Errorf("in %s, a process holds a host file: %s", id, l)
			}
			if strings.Contains(l, "pipe:[") {
				pipes++
			}
		}
		// web, child and its sleep, the interpreter and its sleep: two each (1 and 2), plus
		// the interpreter's fds 3 and 4 and this shell's stdout and stderr.
		if pipes < 14 {
			t.Errorf("in %s, only %d fds are pipes; the listing missed processes:\n%s", id, pipes, out)
		}
		// Capture still works (in a fork: after a restore).
		var stdout bytes.Buffer
		res, err := h.m.RunCode(ctx, id, guest.CodeRequest{Code: "subprocess.run(['echo', 'from-child'])\nprint('py')"}, &stdout, nil)
		if err != nil || !res.OK || stdout.String() != "from-child\npy\n" {
			t.Errorf("in %s, run-code with a subprocess = %+v %v, stdout %q", id, res, err, stdout.String())
		}
		if got := h.sh(t, id, "cat "+guest.ServiceLogDir+"/web.log"); got != "up\n" {
			t.Errorf("in %s, web.log = %q, want the line it wrote at boot", id, got)
		}
		probe := `for f in 0 1 2; do if echo x 2>/dev/null >> /proc/1/fd/$f; then echo "fd $f: OPEN"; fi; done; echo checked`
		if got := h.sh(t, id, probe); got != "checked\n" {
			t.Errorf("in %s, PID 1's stdio can be opened: %q", id, got)
		}
	}
	check(rec.ID)
	cp, err := h.m.Checkpoint(ctx, rec.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	kids := h.forkN(t, rec.ID, cp, 1)
	check(kids[0].ID)
}

// TestSandboxOutputDoesNotGrowHostLog: the floods that used to land in the host's runsc.log —
// a service writing to its stdout, run-code writing to fd 1, an exec writing into the
// interpreter's fd 2 through /proc — 150 MB in all, leave runsc.log under 1 MiB larger. The
// service's output is in its bounded log in the sandbox; run-code's reaches its caller,
// bounded.
func TestSandboxOutputDoesNotGrowHostLog(t *testing.T) {
	h := newHarness(t, nil)
	ctx := tctx(t)
	rec, err := h.m.Create(ctx, sandbox.CreateOptions{Services: []guest.Service{{Name: "noisy", Argv: []string{"/bin/sh", "-c",
		"while [ ! -e /tmp/go ]; do sleep 0.05; done; head -c 50000000 /dev/zero; echo last; touch /tmp/noisy.done; exec sleep 1000"}}}})
	if err != nil {
		t.Fatal(err)
	}
	runscLog := filepath.Join(h.be.InstanceDir(rec.EngineID), "runsc.log")
	size := func() int64 {
		fi, err := os.Stat(runscLog)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()

	h.sh(t, rec.ID, "touch /tmp/go; timeout 60 sh -c 'while [ ! -e /tmp/noisy.done ]; do sleep 0.05; done'")
	var out, errb bytes.Buffer
	res, err := h.m.RunCode(ctx, rec.ID, guest.CodeRequest{Code: "import os\nfor _ in range(50): os.write(1, b'X' * (1 << 20))\nos.getpid()"}, &out, &errb)
	if err != nil || !res.OK || !res.OutputTruncated || out.Len() != guest.MaxCodeOutputBytes {
		t.Fatalf("50 MiB of os.write(1) = %+v %v, stdout %d bytes; want it cut at %d", res, err, out.Len(), guest.MaxCodeOutputBytes)
	}
	pid := strings.TrimSpace(res.Value)
	// Between calls, into the interpreter's fd 2 (a pipe the agent drains and drops).
	h.sh(t, rec.ID, "head -c 50000000 /dev/zero > /proc/"+pid+"/fd/2")
	if v := h.code(t, rec.ID, "'still here'"); v != "'still here'" {
		t.Errorf("the interpreter after the flood: %s", v)
	}
	after := size()
	t.Logf("runsc.log: %d bytes before, %d after 150 MB of output (grew %d)", before, after, after-before)
	if after-before >= 1<<20 {
		t.Errorf("runsc.log grew by %d bytes, want < 1 MiB", after-before)
	}

	sizes := h.sh(t, rec.ID, "stat -c %s "+guest.ServiceLogDir+"/noisy.log "+guest.ServiceLogDir+"/noisy.log.1; tail -c 5 "+guest.ServiceLogDir+"/noisy.log")
	f := strings.Fields(sizes)
	if len(f) != 3 || f[1] != "1048576" || f[2] != "last" {
		t.Errorf("service log sizes and tail %q, want noisy.log ≤ 1 MiB ending in the last line, noisy.log.1 1 MiB", sizes)
	}
	st, err := h.m.Services(ctx, rec.ID)
	if err != nil || len(st) != 1 || st[0].Log != guest.ServiceLogDir+"/noisy.log" {
		t.Errorf("services status = %+v %v, want the log path", st, err)
	}
}
