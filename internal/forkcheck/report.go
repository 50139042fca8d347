package forkcheck

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Counts tallies verdicts.
type Counts struct{ Pass, Fail, Documented, Missing int }

// Tally counts rows by verdict.
func Tally(rows []Row) Counts {
	var c Counts
	for _, r := range rows {
		switch r.Verdict {
		case Pass:
			c.Pass++
		case Fail:
			c.Fail++
		case Noted:
			c.Documented++
		case Missing:
			c.Missing++
		}
	}
	return c
}

// Failed reports whether any row failed or is missing.
func (c Counts) Failed() bool { return c.Fail+c.Missing > 0 }

// PrintTable writes the human table: one line per row with each series'
// result, then the documented rows' reasons and a summary line.
func PrintTable(w io.Writer, title string, series []string, rows []Row) {
	fmt.Fprintln(w, title)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "PROBE\tROW\tEXPECT\t%s\tVERDICT\n", strings.ToUpper(strings.Join(series, "\t")))
	for _, r := range rows {
		res := make([]string, len(series))
		for i, s := range series {
			res[i] = r.Results[s]
		}
		expect := string(r.Expect)
		if r.Want != "" {
			expect += " = " + r.Want
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Probe, r.Name, expect, strings.Join(res, "\t"), strings.ToUpper(string(r.Verdict)))
	}
	tw.Flush()
	var notes []string
	for _, r := range rows {
		switch r.Verdict {
		case Noted:
			notes = append(notes, fmt.Sprintf("  documented: %s %s: %s. Mitigation: %s", r.Probe, r.Name, r.Why, r.Mitigation))
		case Fail, Missing:
			notes = append(notes, fmt.Sprintf("  FAILED: %s %s: expected %s (%s); got %v", r.Probe, r.Name, r.Expect, r.Why, r.Results))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, strings.Join(notes, "\n"))
	}
	c := Tally(rows)
	fmt.Fprintf(w, "\n%d rows: %d pass, %d fail, %d documented, %d missing\n", len(rows), c.Pass, c.Fail, c.Documented, c.Missing)
}
