package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

func TestParseServices(t *testing.T) {
	svcs, err := parseServices([]string{"web=python3 -m http.server", "tick=sleep 1"},
		[]string{"web=restart", "tick=signal:USR2"}, []string{"web=always", "tick=no"})
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 2 || svcs[0].Name != "web" || svcs[0].OnFork != onForkRestart ||
		strings.Join(svcs[0].Argv, " ") != "/bin/sh -c exec python3 -m http.server" {
		t.Errorf("web: %+v", svcs[0])
	}
	if svcs[0].Restart != restartAlways || svcs[1].Restart != restartNo {
		t.Errorf("restart policies %q %q, want always and no", svcs[0].Restart, svcs[1].Restart)
	}
	if svcs[1].OnFork != onForkSignal || svcs[1].Signal != 12 {
		t.Errorf("tick: %+v", svcs[1])
	}
	if svcs, _ := parseServices([]string{"a=b"}, nil, nil); svcs[0].OnFork != onForkKeep || svcs[0].Restart != "" {
		t.Errorf("default policies %q %q, want keep and \"\" (on-failure)", svcs[0].OnFork, svcs[0].Restart)
	}
	for _, bad := range []struct{ svc, pol, restart []string }{
		{[]string{"noequals"}, nil, nil},
		{[]string{"=cmd"}, nil, nil},
		{[]string{"a=x", "a=y"}, nil, nil},
		{[]string{"a=x"}, []string{"b=restart"}, nil},
		{[]string{"a=x"}, []string{"a=sometimes"}, nil},
		{[]string{"a=x"}, []string{"a=restart:HUP"}, nil},
		{[]string{"a=x"}, []string{"a=signal:NOPE"}, nil},
		{[]string{"a=x"}, nil, []string{"a=sometimes"}},
		{[]string{"a=x"}, nil, []string{"a=On-Failure"}},
		{[]string{"a=x"}, nil, []string{"b=always"}},
		{[]string{"a=x"}, nil, []string{"a"}},
		{[]string{"a b=x"}, nil, nil},
	} {
		_, err := parseServices(bad.svc, bad.pol, bad.restart)
		if err == nil {
			t.Errorf("parseServices(%q, %q, %q) accepted", bad.svc, bad.pol, bad.restart)
			continue
		}
		if len(bad.restart) > 0 && !strings.Contains(err.Error(), "--restart") {
			t.Errorf("parseServices(%q, %q, %q) = %v, want it to name --restart", bad.svc, bad.pol, bad.restart, err)
		}
	}
}

// A single simple command replaces its shell (exec), so signals reach the program; anything
// a shell must run stays under /bin/sh -c as written.
func TestServiceArgv(t *testing.T) {
	for cmd, exec := range map[string]bool{
		"python3 -m http.server":                    true,
		`python3 -c "import time; time.sleep(1e6)"`: true,
		"/usr/bin/node server.js --port $PORT":      true,
		"echo $$ > /tmp/pid; exec sleep 1000":       false,
		"a && b":                                    false,
		"FOO=1 prog":                                false,
		"prog > /tmp/log":                           false,
		"prog &":                                    false,
		"cd /srv":                                   false,
		"while :; do sleep 1; done":                 false,
		"$PROG --flag":                              false,
		"unbalanced 'quote":                         false,
	} {
		argv := serviceArgv(cmd)
		want := cmd
		if exec {
			want = "exec " + cmd
		}
		if len(argv) != 3 || argv[0] != "/bin/sh" || argv[1] != "-c" || argv[2] != want {
			t.Errorf("serviceArgv(%q) = %q, want /bin/sh -c %q", cmd, argv, want)
		}
	}
}

func TestShorten(t *testing.T) {
	for in, want := range map[string]string{"short": "short", "exactly-ten": "exactly-t…", "ünïcödé-ünïcödé": "ünïcödé-ü…"} {
		if got := shorten(in, 10); got != want {
			t.Errorf("shorten(%q, 10) = %q, want %q", in, got, want)
		}
	}
}

// TestChildrenFirst: `checkpoints rm` given a chain oldest first removes the newest first,
// so no parent is refused for a child removed later in the same call.
func TestChildrenFirst(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	all := []wire.Checkpoint{
		{ID: "cp-a", Tag: "base", CreatedAt: t0},
		{ID: "cp-b", ParentID: "cp-a", Tag: "fork", CreatedAt: t0.Add(time.Second)},
		{ID: "cp-c", ParentID: "cp-b", Tag: "fork", CreatedAt: t0.Add(2 * time.Second)},
		{ID: "cp-x", CreatedAt: t0},
	}
	for _, tc := range []struct{ in, want string }{
		{"cp-a cp-b cp-c", "cp-c cp-b cp-a"},
		{"base cp-x cp-c", "cp-c base cp-x"},
		{"fork cp-a", "fork cp-a"}, // "fork" is cp-c, the newest with that tag
		{"cp-a nope cp-b", "nope cp-b cp-a"},
	} {
		if got := strings.Join(childrenFirst(strings.Fields(tc.in), all), " "); got != tc.want {
			t.Errorf("childrenFirst(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestExecFlagHint: a flag meant for the command (python3 -V without --) is refused with
// the hint to put -- before the command; nothing is sent to a daemon.
func TestExecFlagHint(t *testing.T) {
	code, _, stderr := runCLI(t, "--state-dir", t.TempDir(), "sandbox", "exec", "agent", "python3", "-V")
	if code != 1 || !strings.Contains(stderr, "-V") || !strings.Contains(stderr, "-- CMD") {
		t.Errorf("exit %d, stderr %q: want the unknown flag and the hint to use --", code, stderr)
	}
}
