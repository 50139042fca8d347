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
		{"gctrace=1, schedtrace=1000", true, "gctrace=1, schedtrace=1000", false},
		{"schedtracex=1", true, "schedtracex=1," + sysmonGODEBUG, true}, // another key
	} {
		got, reexec := godebugForServe(c.in, c.set)
		if got != c.want || reexec != c.reexec {
			t.Errorf("godebugForServe(%q, %v) = %q, %v; want %q, %v", c.in, c.set, got, reexec, c.want, c.reexec)
		}
	}
}

// After the re-execution the caller's GODEBUG is back (or gone, when it was unset), for the
// daemon's own children; the marker is gone too.
func TestReexecForSysmonRestoresTheCallersGodebug(t *testing.T) {
	for _, c := range []struct {
		marker  string
		want    string
		wantSet bool
	}{{"=gctrace=1", "gctrace=1", true}, {"=", "", true}, {"unset", "", false}} {
		t.Setenv("GODEBUG", sysmonGODEBUG)
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
