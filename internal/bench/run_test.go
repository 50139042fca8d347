package bench

import (
	"strings"
	"testing"
)

func stepNames(steps []step) string {
	var names []string
	for _, st := range steps {
		names = append(names, st.name)
	}
	return strings.Join(names, ",")
}

// TestStepsRunWarmFirstThenOnlyThoseNamed checks zygo-bench -only: warm
// always runs, first (the other steps read its figures); the named steps
// follow in the bench's order whatever order they were named in; an
// unknown name fails before anything runs, naming the known steps.
func TestStepsRunWarmFirstThenOnlyThoseNamed(t *testing.T) {
	b := &runner{}
	for _, c := range []struct {
		only []string
		want string
	}{
		{nil, "warm,ideal,cold,floor,node,growth,scale,memory,pools"},
		{[]string{"scale", "growth"}, "warm,growth,scale"},
		{[]string{"pools", "pools"}, "warm,pools"},
	} {
		got, err := b.steps(c.only)
		if err != nil {
			t.Fatalf("%v: %v", c.only, err)
		}
		if stepNames(got) != c.want {
			t.Errorf("-only %v: ran %s, want %s", c.only, stepNames(got), c.want)
		}
	}
	_, err := b.steps([]string{"growth", "bogus"})
	if err == nil || !strings.Contains(err.Error(), `"bogus"`) || !strings.Contains(err.Error(), "growth, scale") {
		t.Fatalf("unknown step: got %v, want an error naming it and the known steps", err)
	}
}
