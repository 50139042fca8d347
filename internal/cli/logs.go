package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

func newLogsCmd(g *globals) *cobra.Command {
	var follow bool
	var request string
	var out *Output
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print a function's logs (stdout/stderr per request, and Zygo's warm-up reports)",
		Long: "Print a function's logs (stdout/stderr per request, and Zygo's warm-up reports).\n" +
			"-o json prints each line as one JSON object (id, function, version, request_id, stream, at, line), also with -f.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			var after int64
			for {
				body, err := c.Logs(cmd.Context(), args[0], zygo.LogsQuery{RequestID: request, After: after})
				if err != nil {
					if cmd.Context().Err() != nil {
						return nil
					}
					return err
				}
				if err := printLogs(cmd.OutOrStdout(), body, out.JSON()); err != nil {
					return err
				}
				first := after == 0
				after = body.Next
				if !follow {
					if len(body.Lines) == 0 {
						if first && request != "" {
							return noRequestLines(args[0], request)
						}
						return nil
					}
					continue // the next page
				}
				if len(body.Lines) == 0 {
					select {
					case <-cmd.Context().Done():
						return nil
					case <-time.After(300 * time.Millisecond):
					}
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines")
	cmd.Flags().StringVar(&request, "request", "", "only lines of this request id")
	out = addOutput(cmd, singleCmd)
	return cmd
}

// noRequestLines is the error of --request ID when the daemon holds no line of it. Every
// request a zygote served has at least its "request … done" line, so the id is unknown, or
// its lines were pruned (the daemon keeps lines, not a list of requests, and cannot tell).
func noRequestLines(function, request string) error {
	return fmt.Errorf("no log lines of request %s in %s: no such request (zygo logs %s shows each line's request id), "+
		"or its lines are older than the newest 20,000 the function keeps", request, function, function)
}

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
		fmt.Fprintf(w, "%s %s %-6s %s\n", l.At.Format("15:04:05.000"), req, l.Stream, l.Line)
	}
	return nil
}
