package bench

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func stepNames(steps []step) string {
	var names []string
	for _, st := range steps {
		names = append(names, st.name)
	}
	return strings.Join(names, ",")
}

// TestStepsRunWarmFirstThenOnlyThoseNamed checks zygo-bench -only as
// main.go reads it (ParseOnly, then steps): warm always runs, first (the
// other steps read its figures), and alone for "warm"; the named steps follow
// in the bench's order whatever order they were named in, spaces around a
// name ignored; an unknown name fails in ParseOnly (before a daemon starts),
// naming the known steps.
func TestStepsRunWarmFirstThenOnlyThoseNamed(t *testing.T) {
	b := &runner{}
	for _, c := range []struct {
		only string
		want string
	}{
		{"", "warm,ideal,cold,floor,node,growth,scale,memory,pools"},
		{"scale,growth", "warm,growth,scale"},
		{"growth, scale", "warm,growth,scale"},
		{"pools,pools", "warm,pools"},
		{"warm", "warm"},
		{"warm,cold", "warm,cold"},
	} {
		names, onlyWarm, err := ParseOnly(c.only)
		if err != nil {
			t.Fatalf("%q: %v", c.only, err)
		}
		got, err := b.steps(names, onlyWarm)
		if err != nil {
			t.Fatalf("%q: %v", c.only, err)
		}
		if stepNames(got) != c.want {
			t.Errorf("-only %q: ran %s, want %s", c.only, stepNames(got), c.want)
		}
	}
	_, _, err := ParseOnly("growth,bogus")
	if err == nil || !strings.Contains(err.Error(), `"bogus"`) || !strings.Contains(err.Error(), "growth, scale") {
		t.Fatalf("unknown step: got %v, want an error naming it and the known steps", err)
	}
	if _, err := b.steps([]string{"bogus"}, false); err == nil { // Config.Only set by a caller
		t.Fatal("steps took an unknown name")
	}
}

// TestReadCountsSeesFaultsAndSwitches: ReadCounts of this process counts the
// page faults of memory it touches for the first time and the context
// switches of its threads sleeping.
func TestReadCountsSeesFaultsAndSwitches(t *testing.T) {
	before, err := ReadCounts(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(-1, 0, 64<<12, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Munmap(mem) }()
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 1 // one fault a page
	}
	for i := 0; i < 20; i++ {
		time.Sleep(time.Millisecond)
	}
	after, err := ReadCounts(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	if d.Faults < 64 {
		t.Errorf("touching 64 new pages counted %d faults", d.Faults)
	}
	if d.Switches < 20 {
		t.Errorf("20 sleeps counted %d context switches", d.Switches)
	}
}
