//go:build linux

package cli

import (
	"os"
	"testing"
)

func TestGodebugForServe(t *testing.T) {
	for _, c := range []struct {
		in     string
		set    bool
		want   string
		reexec bool
	}{
		{"", false, sysmonGODEBUG, true},
		{"", true, sysmonGODEBUG, true},
		{"madvdontneed=1", true, "madvdontneed=1," + sysmonGODEBUG, true},
		{"schedtrace=0", true, "schedtrace=0", false}, // the caller's choice stands
		{"gctrace=1,schedtrace=1000", true, "gctrace=1,schedtrace=1000", false},
		// The runtime matches keys exactly: " schedtrace" is not its key, so not the caller's choice.
		{"gctrace=1, schedtrace=1000", true, "gctrace=1, schedtrace=1000," + sysmonGODEBUG, true},
		{"schedtracex=1", true, "schedtracex=1," + sysmonGODEBUG, true},
	} {
		got, reexec := godebugForServe(c.in, c.set)
		if got != c.want || reexec != c.reexec {
			t.Errorf("godebugForServe(%q, %v) = %q, %v; want %q, %v", c.in, c.set, got, reexec, c.want, c.reexec)
		}
	}
}

func TestWantsReexec(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"serve"}, true},
		{[]string{"serve", "--no-sandboxes"}, true},
		{[]string{"--state-dir", "/tmp/x", "serve"}, true},
		{[]string{"serve", "--help"}, false},
		{[]string{"serve", "-h"}, false},
		{[]string{"ls"}, false},
		{[]string{"pool", "ls"}, false},
		{[]string{}, false},
	} {
		if got := wantsReexec(c.args); got != c.want {
			t.Errorf("wantsReexec(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

// After the re-execution the caller's GODEBUG is back (or gone, when it was unset), for the
// daemon's own children; the marker is gone too.
func TestReexecForSysmonRestoresTheCallersGodebug(t *testing.T) {
	for _, c := range []struct {
		marker, godebug string
		want            string
		wantSet         bool
	}{
		{"=gctrace=1", "gctrace=1," + sysmonGODEBUG, "gctrace=1", true},
		{"=", sysmonGODEBUG, "", true},
		{"unset", sysmonGODEBUG, "", false},
	} {
		t.Setenv("GODEBUG", c.godebug)
		t.Setenv(reexecMarker, c.marker)
		if err := reexecForSysmon(); err != nil {
			t.Fatalf("marker %q: %v", c.marker, err)
		}
		got, set := os.LookupEnv("GODEBUG")
		if got != c.want || set != c.wantSet {
			t.Errorf("marker %q: GODEBUG = %q (set %v), want %q (set %v)", c.marker, got, set, c.want, c.wantSet)
		}
		if _, ok := os.LookupEnv(reexecMarker); ok {
			t.Errorf("marker %q: %s still set", c.marker, reexecMarker)
		}
	}
}

// A marker the daemon did not set (its caller's environment) does not stand in for the
// re-execution: with GODEBUG already carrying a schedtrace of the caller's, it is dropped and
// GODEBUG left as it is (a re-execution is then not needed); it never becomes GODEBUG.
func TestReexecForSysmonIgnoresAForeignMarker(t *testing.T) {
	t.Setenv("GODEBUG", "schedtrace=0")
	t.Setenv(reexecMarker, "=http2debug=2")
	if err := reexecForSysmon(); err != nil {
		t.Fatal(err)
	}
	if got := os.Getenv("GODEBUG"); got != "schedtrace=0" {
		t.Errorf("GODEBUG = %q, want the caller's schedtrace=0", got)
	}
	if _, ok := os.LookupEnv(reexecMarker); ok {
		t.Errorf("%s still set", reexecMarker)
	}
}
