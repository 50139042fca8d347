package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// logsOptions are the flags of `zygo logs`.
type logsOptions struct {
	follow  bool
	request string
	since   string
	tail    int
}

func newLogsCmd(g *globals) *cobra.Command {
	var o logsOptions
	var out *Output
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print a function's logs (stdout/stderr per request, and Zygo's warm-up reports)",
		Long: "Print a function's logs, one line each: its time (RFC 3339, UTC), request id, stream and text.\n" +
			"--since and --tail select the older lines printed; -f then prints new lines as they come\n" +
			"(alone, -f starts at the end: only new lines).\n" +
			"-o json prints each line as one JSON object (id, function, version, request_id, stream, at, line), also with -f.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := o.query(time.Now())
			if err != nil {
				return err
			}
			err = printLogPages(cmd.Context(), g.client(), args[0], q, o, out.JSON(), cmd.OutOrStdout())
			if cmd.Context().Err() != nil {
				return nil // Ctrl-C ends -f
			}
			return err
		},
	}
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "keep printing new lines (alone: only new ones)")
	cmd.Flags().StringVar(&o.request, "request", "", "only lines of this request id (the X-Zygo-Request-Id, or the X-Request-Id its caller gave)")
	cmd.Flags().StringVar(&o.since, "since", "", "only lines since this time: a duration back from now (10m, 1h30m) or an RFC 3339 time")
	cmd.Flags().IntVar(&o.tail, "tail", -1, fmt.Sprintf("only the last N lines (0..%d)", wire.MaxLogsLimit))
	out = addOutput(cmd, singleCmd)
	return cmd
}

// query returns the first query of the flags, or an error naming the flag that is wrong.
func (o logsOptions) query(now time.Time) (zygo.LogsQuery, error) {
	q := zygo.LogsQuery{RequestID: o.request}
	if o.since != "" {
		t, err := wire.ParseSince(o.since, now)
		if err != nil {
			return q, &usageError{fmt.Errorf("--since %q: %w", o.since, err)}
		}
		q.Since = t
	}
	switch {
	case o.tail < -1 || o.tail > wire.MaxLogsLimit:
		return q, usagef("--tail %d: must be 0..%d", o.tail, wire.MaxLogsLimit)
	case o.tail >= 0:
		q.FromEnd, q.Tail = true, o.tail
	case o.follow && o.since == "" && o.request == "":
		q.FromEnd = true // -f alone: only new lines
	}
	return q, nil
}

// printLogPages prints the lines of q, page after page, then with -f keeps asking for new
// ones every 300 ms until ctx ends.
func printLogPages(ctx context.Context, c *zygo.Client, name string, q zygo.LogsQuery, o logsOptions, asJSON bool, w io.Writer) error {
	printed := 0
	for {
		body, err := c.Logs(ctx, name, q)
		if err != nil {
			return err
		}
		if err := printLogs(w, body, asJSON); err != nil {
			return err
		}
		printed += len(body.Lines)
		fromEnd := q.FromEnd
		q.FromEnd, q.After = false, body.Next
		if fromEnd && !o.follow {
			return noLines(name, o.request, printed)
		}
		if len(body.Lines) > 0 && !fromEnd {
			continue // the next page
		}
		if !o.follow {
			return noLines(name, o.request, printed)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// noLines is the error of --request ID when nothing of the request was printed (nil
// otherwise). Every request a zygote served has at least its "request … done" line, so the
// id is unknown, or its lines were pruned (the daemon keeps lines, not a list of requests,
// and cannot tell).
func noLines(function, request string, printed int) error {
	if request == "" || printed > 0 {
		return nil
	}
	return fmt.Errorf("no log lines of request %s in %s: no such request (zygo logs %s shows each line's request id), "+
		"or its lines are older than the newest the function keeps (zygo serve --log-retention-lines)", request, function, function)
}

// logTime is the format of each line's time: RFC 3339 in UTC, to the millisecond.
const logTime = "2006-01-02T15:04:05.000Z07:00"

// printLogs writes body's lines to w: as text, or with asJSON one JSON object a line.
func printLogs(w io.Writer, body wire.LogsBody, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, l := range body.Lines {
			if err := enc.Encode(l); err != nil {
				return err
			}
		}
		return nil
	}
	for _, l := range body.Lines {
		req := l.RequestID
		if req == "" {
			req = "-"
		}
		fmt.Fprintf(w, "%s %s %-6s %s\n", l.At.UTC().Format(logTime), req, l.Stream, printable(l.Line))
	}
	return nil
}

// printable returns line with every control character (C0 but tab, DEL, C1) shown as \xNN or
// \u00NN: a function's or tenant's output cannot move the cursor, retitle the terminal or
// forge a line of zygo's own (-o json keeps the bytes as they were, escaped by JSON).
func printable(line string) string {
	clean := true
	for _, r := range line {
		if isControl(r) {
			clean = false
			break
		}
	}
	if clean {
		return line
	}
	var b strings.Builder
	for _, r := range line {
		switch {
		case r < 0x80 && isControl(r):
			fmt.Fprintf(&b, "\\x%02x", r)
		case isControl(r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isControl(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f || (r >= 0x80 && r <= 0x9f) }
