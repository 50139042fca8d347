package forkcheck

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// PrintSandboxTable writes the sandbox mode's human table. It extends PrintTable: the same
// columns (one series, RESULT) with a VALUE column before the verdict — for rows that are not
// `differs`, the value when all copies agree or the range when they are numbers — and the
// documented rows' reasons grouped, since many rows share one (every pid row, for instance).
// Failed rows and the summary line read as in PrintTable.
func PrintSandboxTable(w io.Writer, title string, rep *SandboxesReport) {
	fmt.Fprintln(w, title)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "PROBE\tROW\tEXPECT\t%s\tVALUE\tVERDICT\n", strings.ToUpper(strings.Join(rep.Series, "\t")))
	for _, r := range rep.Rows {
		expect := string(r.Expect)
		if r.Want != "" {
			expect += " = " + r.Want
		}
		value := ""
		if r.Want == "" && r.Expect != Differs {
			value = summarize(rep.Values[r.Probe][r.Name])
		}
		res := make([]string, len(rep.Series))
		for i, s := range rep.Series {
			res[i] = r.Results[s]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Probe, r.Name, expect, strings.Join(res, "\t"), value, strings.ToUpper(string(r.Verdict)))
	}
	tw.Flush()

	type group struct {
		why, mitigation string
		rows            []string
	}
	var groups []*group
	byReason := map[string]*group{}
	var failed []string
	for _, r := range rep.Rows {
		switch r.Verdict {
		case Noted:
			key := r.Why + "\x00" + r.Mitigation
			g := byReason[key]
			if g == nil {
				g = &group{why: r.Why, mitigation: r.Mitigation}
				byReason[key] = g
				groups = append(groups, g)
			}
			g.rows = append(g.rows, r.Probe+" "+r.Name)
		case Fail, Missing:
			failed = append(failed, fmt.Sprintf("  FAILED: %s %s: expected %s (%s); got %v", r.Probe, r.Name, r.Expect, r.Why, r.Results))
		}
	}
	if len(groups)+len(failed) > 0 {
		fmt.Fprintln(w)
	}
	for _, f := range failed {
		fmt.Fprintln(w, f)
	}
	for _, g := range groups {
		fmt.Fprintf(w, "  documented: %s:\n      %s.\n      Mitigation: %s.\n", strings.Join(g.rows, "; "), g.why, g.mitigation)
	}
	c := Tally(rep.Rows)
	fmt.Fprintf(w, "\n%d rows: %d pass, %d fail, %d documented, %d missing\n", len(rep.Rows), c.Pass, c.Fail, c.Documented, c.Missing)
}

// summarize returns the one value all copies gave (strings unquoted, long ones shortened),
// "MIN..MAX" when they gave several numbers, else "".
func summarize(vals []json.RawMessage) string {
	set := map[string]bool{}
	var one json.RawMessage
	lo, hi, numeric := 0.0, 0.0, true
	for i, v := range vals {
		if v == nil {
			return ""
		}
		one = v
		set[canonical(v)] = true
		var f float64
		if json.Unmarshal(v, &f) != nil {
			numeric = false
			continue
		}
		if i == 0 || f < lo {
			lo = f
		}
		if i == 0 || f > hi {
			hi = f
		}
	}
	switch {
	case len(set) == 1:
		s := canonical(one)
		var str string
		if json.Unmarshal(one, &str) == nil {
			s = str
		}
		if len(s) > 22 {
			s = s[:20] + "…"
		}
		return s
	case numeric && len(vals) > 0:
		return fmt.Sprintf("%g..%g", lo, hi)
	}
	return ""
}
