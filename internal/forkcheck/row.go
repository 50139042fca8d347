// Package forkcheck is Zygo's fork-safety auditor (`zygo check`): it copies
// probe programs N ways — warm-function requests forked from one zygote, or
// sandboxes restored from one checkpoint — collects what each copy draws and
// sees, and says, row by row, which values repeat. It reproduces the
// experiment of ../shared/seeds/000 against Zygo itself.
//
// Every row has an expectation: Differs (must not repeat), Same (must be
// identical, and equal to a given value when one is set: isolation rows
// like "sockets in the fd table" = 0), or Documented (a value Zygo cannot
// change from outside; reported with its reason and mitigation, never
// called a pass). A row fails when its values break the expectation; the
// auditor exits non-zero when any row fails.
package forkcheck

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Expect is what a row's values must do across copies.
type Expect string

const (
	Differs    Expect = "differs"
	Same       Expect = "same"
	Documented Expect = "documented"
)

// Verdict is a row's outcome.
type Verdict string

const (
	Pass    Verdict = "pass"
	Fail    Verdict = "fail"
	Noted   Verdict = "documented"
	Missing Verdict = "missing" // the probe did not report the row: a failure
)

// Spec is the expectation for one row.
type Spec struct {
	Expect Expect
	// Want, for Same rows, is the JSON every copy must report ("" = any
	// value, as long as all copies agree).
	Want string
	// Why explains the row in plain words; for Documented rows, why Zygo
	// cannot change it, and Mitigation what the user can do.
	Why        string
	Mitigation string
}

// Series is one set of N copies of a probe (for example: "sequential").
type Series struct {
	Name   string
	Values []map[string]json.RawMessage // one map per copy: row → value
}

// Row is one line of the report.
type Row struct {
	Probe      string            `json:"probe"`
	Name       string            `json:"row"`
	Expect     Expect            `json:"expect"`
	Want       string            `json:"want,omitempty"`
	Results    map[string]string `json:"results"` // series → "11 different" etc.
	Distinct   map[string]int    `json:"distinct"`
	Verdict    Verdict           `json:"verdict"`
	Why        string            `json:"why,omitempty"`
	Mitigation string            `json:"mitigation,omitempty"`
	Sample     map[string]string `json:"sample,omitempty"` // series → a value, for `same` rows
}

// Describe renders how many distinct values n copies gave, in the seed's
// words: "same in all 11", "11 different", "k distinct of 11".
func Describe(distinct, n int) string {
	switch {
	case n == 0:
		return "no values"
	case distinct == 1:
		return fmt.Sprintf("same in all %d", n)
	case distinct == n:
		return fmt.Sprintf("%d different", n)
	default:
		return fmt.Sprintf("%d distinct of %d", distinct, n)
	}
}

// Evaluate builds the rows of one probe from its series and its specs.
// Rows the specs name but no copy reported are Missing (a failure); values
// reported without a spec are ignored.
func Evaluate(probe string, specs map[string]Spec, series []Series) []Row {
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	rows := make([]Row, 0, len(names))
	for _, name := range names {
		sp := specs[name]
		r := Row{Probe: probe, Name: name, Expect: sp.Expect, Want: sp.Want, Why: sp.Why, Mitigation: sp.Mitigation,
			Results: map[string]string{}, Distinct: map[string]int{}, Sample: map[string]string{}, Verdict: Pass}
		for _, s := range series {
			set := map[string]bool{}
			n := 0
			var sample string
			for _, copyVals := range s.Values {
				v, ok := copyVals[name]
				if !ok {
					continue
				}
				n++
				sample = canonical(v)
				set[sample] = true
			}
			r.Results[s.Name], r.Distinct[s.Name] = Describe(len(set), n), len(set)
			if len(set) == 1 {
				r.Sample[s.Name] = sample
			}
			r.Verdict = worse(r.Verdict, judge(sp, len(set), n, len(s.Values), sample))
		}
		rows = append(rows, r)
	}
	return rows
}

func judge(sp Spec, distinct, n, copies int, sample string) Verdict {
	if n < copies || n == 0 {
		return Missing
	}
	switch sp.Expect {
	case Differs:
		if distinct != n {
			return Fail
		}
	case Same:
		if distinct != 1 || (sp.Want != "" && sample != sp.Want) {
			return Fail
		}
	case Documented:
		return Noted
	}
	return Pass
}

func worse(a, b Verdict) Verdict {
	rank := map[Verdict]int{Pass: 0, Noted: 1, Fail: 2, Missing: 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// canonical re-encodes a JSON value so that equal values compare equal.
func canonical(v json.RawMessage) string {
	var x any
	if err := json.Unmarshal(v, &x); err != nil {
		return strings.TrimSpace(string(v))
	}
	b, _ := json.Marshal(x)
	return string(b)
}
