package function

import (
	"strings"
	"testing"
)

// TestLimitWarnings: without a Limiter a deploy warns, naming each limit that has a value
// (pids and cpu_ms only when set); with one it says nothing.
func TestLimitWarnings(t *testing.T) {
	m := testManager(0)
	man, err := ParseManifest([]byte("name = \"a\"\nruntime = \"python\"\nhandler = \"main:handler\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	w := m.limitWarnings(man)
	if len(w) != 1 || !strings.HasPrefix(w[0], "limits.memory_mib (256), limits.zygote_memory_mib (1024), limits.zygote_pids (256) are not enforced: this daemon cannot manage cgroups") {
		t.Errorf("defaults: warnings %q", w)
	}
	man.Limits.PIDs, man.Limits.CPUMs = 64, 2000
	if w := m.limitWarnings(man); len(w) != 1 || !strings.Contains(w[0], "limits.pids (64), limits.cpu_ms (2000), ") {
		t.Errorf("pids and cpu_ms set: warnings %q", w)
	}
	m.limiter = &fakeLimiter{}
	if w := m.limitWarnings(man); w != nil {
		t.Errorf("with a limiter: warnings %q, want none", w)
	}
}

// fakeLimiter is a Limiter that is never called: its presence is what limitWarnings reads.
type fakeLimiter struct{ Limiter }
