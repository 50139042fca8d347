package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// How a command prints what it got (the Docker/kubectl habit): every command that prints a
// result takes -o/--output table|json, and list commands -q/--quiet (ids or names only, one a
// line, for `xargs`). A command registers the flags with addOutput and prints through
// Output.print:
//
//	out := addOutput(cmd, listCmd)            // in the constructor; listCmd adds -q
//	...
//	return out.print(cmd, recs,                // RunE: recs is what -o json prints
//		func(w io.Writer) { fmt.Fprintln(w, "ID\tNAME"); ... }, // the table, tab-separated
//		func() []string { return ids })        // what -q prints; nil for a non-list command
//
// An unknown format fails at flag parsing: a usage error (exit status 2) naming -o.

// Output formats.
const (
	formatTable = "table"
	formatJSON  = "json"
)

// Output is a command's choice of output, filled by its flags.
type Output struct {
	format formatValue
	quiet  bool
}

// formatValue is -o's value: it refuses anything but table and json as it is parsed.
type formatValue string

func (f *formatValue) String() string { return string(*f) }
func (f *formatValue) Type() string   { return "format" }
func (f *formatValue) Set(s string) error {
	switch s {
	case formatTable, formatJSON:
		*f = formatValue(s)
		return nil
	}
	return fmt.Errorf("unknown output format %q: want table or json", s)
}

// List commands take -q; others do not.
const (
	listCmd   = true
	singleCmd = false
)

// addOutput registers -o/--output on cmd, and -q/--quiet when list is listCmd, and returns
// the Output they fill. A command that had --json keeps it as a hidden alias of -o json.
func addOutput(cmd *cobra.Command, list bool) *Output {
	o := &Output{format: formatTable}
	cmd.Flags().VarP(&o.format, "output", "o", "output format: table or json")
	if list {
		cmd.Flags().BoolVarP(&o.quiet, "quiet", "q", false, "print only the ids (or names), one a line")
	}
	return o
}

// addJSONAlias registers --json (hidden) on cmd as the older spelling of -o json.
func (o *Output) addJSONAlias(cmd *cobra.Command) {
	cmd.Flags().Var(jsonAlias{o}, "json", "same as -o json")
	cmd.Flags().Lookup("json").NoOptDefVal = "true"
	_ = cmd.Flags().MarkHidden("json")
}

// jsonAlias is --json: true sets -o json.
type jsonAlias struct{ o *Output }

func (a jsonAlias) String() string { return "false" }
func (a jsonAlias) Type() string   { return "bool" }
func (a jsonAlias) Set(s string) error {
	switch s {
	case "true":
		a.o.format = formatJSON
	case "false":
	default:
		return fmt.Errorf("want true or false, not %q", s)
	}
	return nil
}

// JSON reports whether -o json was asked for.
func (o *Output) JSON() bool { return o.format == formatJSON }

// print writes v to cmd's stdout: with -q the strings of ids (one a line), with -o json v
// as indented JSON, else table's rows through a tabwriter (columns separated by tabs, a
// header row first). ids may be nil for a command without -q. It returns the write error.
func (o *Output) print(cmd *cobra.Command, v any, table func(w io.Writer), ids func() []string) error {
	w := cmd.OutOrStdout()
	switch {
	case o.quiet && ids != nil:
		for _, id := range ids() {
			if _, err := fmt.Fprintln(w, id); err != nil {
				return err
			}
		}
		return nil
	case o.JSON():
		return writeJSON(w, v)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// writeJSON writes v to w as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printJSON writes v to cmd's stdout as indented JSON.
func printJSON(cmd *cobra.Command, v any) error { return writeJSON(cmd.OutOrStdout(), v) }
