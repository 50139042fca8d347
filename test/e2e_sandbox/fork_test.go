package e2esandbox

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

var forkSummaryRE = regexp.MustCompile(`(\d+) of (\d+) children running in (\S+)`)

// TestForkMany forks 3 and then 11 children through the CLI and logs the wall time of each
// (no threshold: timings are reported, not asserted). Every child runs, with its own
// generation and hostname, and answers exec.
func TestForkMany(t *testing.T) {
	d := startDaemon(t)
	src := d.OK("sandbox", "create", "--name", "many")
	d.OK("sandbox", "run-code", src, "--code", "import random; x = 41")
	for _, n := range []int{3, 11} {
		t0 := time.Now()
		out, errOut, code := d.CLI("sandbox", "fork", src, "-n", strconv.Itoa(n))
		wall := time.Since(t0)
		kids := lines(out)
		if code != 0 || len(kids) != n {
			t.Fatalf("fork -n %d: exit %d, %d children\nstderr: %s", n, code, len(kids), errOut)
		}
		m := forkSummaryRE.FindStringSubmatch(errOut)
		if m == nil || m[1] != strconv.Itoa(n) {
			t.Fatalf("fork -n %d summary: %q", n, errOut)
		}
		t0 = time.Now()
		gens, hosts, draws := map[string]bool{}, map[string]bool{}, map[string]bool{}
		for _, k := range kids {
			gens[d.OK("sandbox", "generation", k)] = true
			hosts[d.OK("sandbox", "exec", k, "--", "cat", "/etc/hostname")] = true
			draws[d.OK("sandbox", "run-code", k, "--code", "(x, random.random())")] = true
		}
		answer := time.Since(t0)
		if len(gens) != n || len(hosts) != n || len(draws) != n {
			t.Errorf("fork -n %d: %d distinct generations, %d hostnames, %d (x, random) values; want %d each",
				n, len(gens), len(hosts), len(draws), n)
		}
		for v := range draws {
			if !strings.HasPrefix(v, "(41, ") {
				t.Errorf("a child lost x: %s", v)
			}
		}
		t.Logf("fork -n %d through the CLI: %s wall (daemon: %s); then %d generation+exec+run-code rounds: %s",
			n, wall.Round(time.Millisecond), m[3], n, answer.Round(time.Millisecond))
		for _, k := range kids {
			d.OK("sandbox", "rm", k)
		}
	}
}

// TestServicesOnFork declares services through the CLI and checks their on_fork policy in a
// child: restart gives a fresh process, signal delivers the chosen signal, keep leaves it.
func TestServicesOnFork(t *testing.T) {
	d := startDaemon(t)
	src := d.OK("sandbox", "create", "--name", "svc",
		"--service", "fresh=echo $$ > /tmp/fresh.pid; exec sleep 1000",
		"--service", "sig=trap 'echo got >> /tmp/sig.log' USR1; while :; do sleep 0.1; done",
		"--service", "same=echo $$ > /tmp/same.pid; exec sleep 1000",
		"--on-fork", "fresh=restart", "--on-fork", "sig=signal:USR1")
	waitFile := func(id, path string) string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			out, _, code := d.CLI("sandbox", "files", "get", id, path)
			if code == 0 && strings.TrimSpace(out) != "" {
				return strings.TrimSpace(out)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never appeared in %s", path, id)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	freshPid, samePid := waitFile(src, "/tmp/fresh.pid"), waitFile(src, "/tmp/same.pid")
	kids := lines(d.OK("sandbox", "fork", src, "-n", "1"))
	if len(kids) != 1 {
		t.Fatalf("fork -n 1 printed %q", kids)
	}
	kid := kids[0]
	if got := waitFile(kid, "/tmp/sig.log"); got != "got" {
		t.Errorf("signal service in the child logged %q, want got", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for waitFile(kid, "/tmp/fresh.pid") == freshPid && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if got := waitFile(kid, "/tmp/fresh.pid"); got == freshPid {
		t.Errorf("restart service in the child still has the parent's pid %s", got)
	}
	if got := waitFile(kid, "/tmp/same.pid"); got != samePid {
		t.Errorf("keep service in the child: pid file %s, want the parent's %s", got, samePid)
	}
	if out, _, _ := d.CLI("sandbox", "files", "get", src, "/tmp/sig.log"); out != "" {
		t.Errorf("the parent's signal service was signalled too: %q", out)
	}
	if msg := d.Fails("sandbox", "create", "--service", "a=true", "--on-fork", "b=restart"); !strings.Contains(msg, "--on-fork") {
		t.Errorf("--on-fork for an undeclared service: %q", msg)
	}
}

// `zygo sandbox services` shows what the agent's supervisor did: a service that keeps failing
// is restarted (count and last exit shown), one with restart=no stays down, a healthy one
// runs with its pid, in a created sandbox and in a fork child.
func TestServicesStatus(t *testing.T) {
	d := startDaemon(t)
	src := d.OK("sandbox", "create", "--name", "status",
		"--service", "ok=exec sleep 1000",
		"--service", "flaky=exit 3",
		"--service", "once=exit 4", "--restart", "once=no")
	byName := func(id string) map[string]guest.ServiceStatus {
		t.Helper()
		var st []guest.ServiceStatus
		if err := json.Unmarshal([]byte(d.OK("sandbox", "services", id, "--json")), &st); err != nil {
			t.Fatal(err)
		}
		m := map[string]guest.ServiceStatus{}
		for _, s := range st {
			m[s.Name] = s
		}
		return m
	}
	for _, id := range []string{src, lines(d.OK("sandbox", "fork", src, "-n", "1"))[0]} {
		deadline := time.Now().Add(20 * time.Second)
		var st map[string]guest.ServiceStatus
		for st = byName(id); st["flaky"].Restarts < 2 && time.Now().Before(deadline); st = byName(id) {
			time.Sleep(200 * time.Millisecond)
		}
		if s := st["flaky"]; s.Restarts < 2 || s.LastExit == nil || s.LastExit.Code != 3 || s.Restart != guest.RestartOnFailure {
			t.Errorf("%s: flaky = %+v, want ≥ 2 restarts after exit code 3", id, s)
		}
		if s := st["once"]; s.Running || s.Restarts != 0 || s.LastExit == nil || s.LastExit.Code != 4 {
			t.Errorf("%s: once (restart=no) = %+v, want one run that exited 4", id, s)
		}
		if s := st["ok"]; !s.Running || s.PID == 0 {
			t.Errorf("%s: ok = %+v, want running with a pid", id, s)
		}
		table := d.OK("sandbox", "services", id)
		if !strings.Contains(table, "code 3") || !strings.Contains(table, "running") {
			t.Errorf("%s: services table lacks the last exit or state:\n%s", id, table)
		}
	}
	if msg := d.Fails("sandbox", "services", "sb-nosuch"); !strings.Contains(msg, "sb-nosuch") {
		t.Errorf("services of an unknown sandbox: %q", msg)
	}
}

// A single-command service declared through the CLI is the program itself (no /bin/sh left
// between), so an on_fork signal reaches the program: it handles it, is not restarted, and no
// second copy appears (a tester found the shell dying of SIGHUP, the program orphaned and a
// second one started by the supervisor).
func TestSignalServiceIsTheProgram(t *testing.T) {
	d := startDaemon(t)
	prog := `python3 -c "import signal,time; signal.signal(signal.SIGHUP, lambda *a: open('/tmp/hup','a').write('x')); open('/tmp/ready','w'); time.sleep(1e6)"`
	src := d.OK("sandbox", "create", "--name", "hup", "--service", "reload="+prog, "--on-fork", "reload=signal")
	// Checkpoint only once the handler is installed: before that SIGHUP's default action ends it.
	d.OK("sandbox", "exec", src, "--", "sh", "-c", "timeout 20 sh -c 'until [ -e /tmp/ready ]; do sleep 0.05; done'")
	kid := lines(d.OK("sandbox", "fork", src, "-n", "1"))[0]
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _, code := d.CLI("sandbox", "files", "get", kid, "/tmp/hup")
		if code == 0 && out == "x" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service's program never handled the fork's SIGHUP (/tmp/hup = %q)", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	procs := d.OK("sandbox", "exec", kid, "--", "sh", "-c", "ps -eo args | grep -c '^python3 -c import signal'")
	if strings.TrimSpace(procs) != "1" {
		t.Errorf("%s python3 processes of the service after the fork, want 1", strings.TrimSpace(procs))
	}
	var st []guest.ServiceStatus
	if err := json.Unmarshal([]byte(d.OK("sandbox", "services", kid, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || !st[0].Running || st[0].Restarts != 0 || st[0].LastExit != nil {
		t.Errorf("after the signal: %+v, want running, never restarted", st)
	}
}

// TestForkNamed forks with caller-chosen names through the CLI (--name per child) and the Go
// SDK (restore with a name), finds each child by its name, and checks that a name in use
// refuses the whole fork (409 naming it) without making anything.
func TestForkNamed(t *testing.T) {
	d := startDaemon(t)
	src := d.OK("sandbox", "create", "--name", "named-src")
	d.OK("sandbox", "run-code", src, "--code", "x = 7")
	out, errOut, code := d.CLI("sandbox", "fork", src, "--name", "kid-one", "--name", "kid-two")
	kids := lines(out)
	if code != 0 || len(kids) != 2 {
		t.Fatalf("fork --name x2: exit %d, %d children\nstderr: %s", code, len(kids), errOut)
	}
	for i, name := range []string{"kid-one", "kid-two"} {
		rec, err := d.Client.GetSandbox(t.Context(), name)
		if err != nil || rec.ID != kids[i] || rec.Name != name || rec.ParentID == "" {
			t.Errorf("GetSandbox(%q) = %+v, %v; want child %d (%s)", name, rec, err, i, kids[i])
		}
		if got := d.OK("sandbox", "run-code", name, "--code", "x"); got != "7" {
			t.Errorf("child %s by name: x = %q, want 7", name, got)
		}
	}
	before, err := d.Client.ListSandboxes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Client.ForkWith(t.Context(), src, wire.ForkBody{N: 2, Names: []string{"kid-three", "kid-two"}}, nil)
	if !zygo.IsConflict(err) || !strings.Contains(err.Error(), "names[1]") || !strings.Contains(err.Error(), "kid-two") {
		t.Errorf("fork onto a name in use = %v; want 409 naming names[1] kid-two", err)
	}
	_, err = d.Client.ForkWith(t.Context(), src, wire.ForkBody{N: 1, Names: []string{"bad name"}}, nil)
	if !zygo.IsBadRequest(err) || !strings.Contains(err.Error(), "names[0]") {
		t.Errorf("fork with a bad name = %v; want 400 naming names[0]", err)
	}
	after, err := d.Client.ListSandboxes(t.Context())
	if err != nil || len(after) != len(before) {
		t.Errorf("refused forks changed the sandboxes: %d before, %d after (%v)", len(before), len(after), err)
	}
	cp, err := d.Client.Checkpoint(t.Context(), src, "named-base")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := d.Client.Restore(t.Context(), cp.ID, wire.RestoreBody{Name: "kid-restored"})
	if err != nil || rec.Name != "kid-restored" {
		t.Fatalf("restore with a name = %+v, %v", rec, err)
	}
	if got := d.OK("sandbox", "run-code", "kid-restored", "--code", "x"); got != "7" {
		t.Errorf("restored child by name: x = %q, want 7", got)
	}
	for _, name := range []string{"kid-one", "kid-two", "kid-restored"} {
		d.OK("sandbox", "rm", name)
	}
}
