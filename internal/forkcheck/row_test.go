package forkcheck

import (
	"encoding/json"
	"fmt"
	"testing"
)

func copies(vals ...string) []map[string]json.RawMessage {
	out := make([]map[string]json.RawMessage, len(vals))
	for i, v := range vals {
		out[i] = map[string]json.RawMessage{"r": json.RawMessage(v)}
	}
	return out
}

func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		d, n int
		want string
	}{{1, 11, "same in all 11"}, {11, 11, "11 different"}, {3, 11, "3 distinct of 11"}, {0, 0, "no values"}} {
		if got := Describe(c.d, c.n); got != c.want {
			t.Errorf("Describe(%d, %d) = %q, want %q", c.d, c.n, got, c.want)
		}
	}
}

// TestEvaluateCanFail proves the auditor flags what it must: a generator
// with a fixed seed repeats, and the row fails.
func TestEvaluateCanFail(t *testing.T) {
	fixed := copies("0.8444218515250481", "0.8444218515250481", "0.8444218515250481")
	mixed := copies("1", "2", "2")
	fresh := copies("1", "2", "3")
	cases := []struct {
		name string
		spec Spec
		vals []map[string]json.RawMessage
		want Verdict
	}{
		{"fixed seed, must differ", Spec{Expect: Differs}, fixed, Fail},
		{"some repeat, must differ", Spec{Expect: Differs}, mixed, Fail},
		{"all differ", Spec{Expect: Differs}, fresh, Pass},
		{"same as wanted", Spec{Expect: Same, Want: "0"}, copies("0", "0", "0"), Pass},
		{"same but not the wanted value", Spec{Expect: Same, Want: "0"}, copies("1", "1", "1"), Fail},
		{"must be same, differs", Spec{Expect: Same}, fresh, Fail},
		{"documented never passes", Spec{Expect: Documented}, fixed, Noted},
		{"a copy did not report", Spec{Expect: Differs}, append(fresh, map[string]json.RawMessage{}), Missing},
		{"equal JSON, different spelling", Spec{Expect: Same}, copies(`{"a": 1, "b": 2}`, `{"b":2,"a":1}`), Pass},
	}
	for _, c := range cases {
		rows := Evaluate("p", map[string]Spec{"r": c.spec}, []Series{{"s", c.vals}})
		if len(rows) != 1 || rows[0].Verdict != c.want {
			t.Errorf("%s: verdict %v, want %v (%+v)", c.name, rows[0].Verdict, c.want, rows)
		}
	}
	// The worst series decides.
	rows := Evaluate("p", map[string]Spec{"r": {Expect: Differs}}, []Series{{"a", fresh}, {"b", fixed}})
	if rows[0].Verdict != Fail || rows[0].Results["a"] != "3 different" || rows[0].Results["b"] != "same in all 3" {
		t.Errorf("two series: %+v", rows[0])
	}
	if c := Tally(rows); !c.Failed() {
		t.Errorf("Tally(%v).Failed() = false", c)
	}
	_ = fmt.Sprint()
}
