package cli

import (
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/guest"
)

func TestParseServices(t *testing.T) {
	svcs, err := parseServices([]string{"web=python3 -m http.server", "tick=sleep 1"},
		[]string{"web=restart", "tick=signal:USR2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 2 || svcs[0].Name != "web" || svcs[0].OnFork != guest.OnForkRestart ||
		strings.Join(svcs[0].Argv, " ") != "/bin/sh -c python3 -m http.server" {
		t.Errorf("web: %+v", svcs[0])
	}
	if svcs[1].OnFork != guest.OnForkSignal || svcs[1].Signal != 12 {
		t.Errorf("tick: %+v", svcs[1])
	}
	if svcs, _ := parseServices([]string{"a=b"}, nil); svcs[0].OnFork != guest.OnForkKeep {
		t.Errorf("default policy %q, want keep", svcs[0].OnFork)
	}
	for _, bad := range []struct{ svc, pol []string }{
		{[]string{"noequals"}, nil},
		{[]string{"=cmd"}, nil},
		{[]string{"a=x", "a=y"}, nil},
		{[]string{"a=x"}, []string{"b=restart"}},
		{[]string{"a=x"}, []string{"a=sometimes"}},
		{[]string{"a=x"}, []string{"a=restart:HUP"}},
		{[]string{"a=x"}, []string{"a=signal:NOPE"}},
	} {
		if _, err := parseServices(bad.svc, bad.pol); err == nil {
			t.Errorf("parseServices(%q, %q) accepted", bad.svc, bad.pol)
		}
	}
}
