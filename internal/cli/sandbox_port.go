package cli

import (
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"
)

// newSandboxPortCmd is `zygo sandbox port ID PORT`: a port inside a sandbox, reachable from
// the host.
func newSandboxPortCmd(g *globals) *cobra.Command {
	var out *Output
	var closePort bool
	cmd := &cobra.Command{
		Use:   "port ID PORT",
		Short: "Publish a TCP port of the sandbox on the host's loopback and print its URL",
		Long: "Publish TCP PORT of the sandbox on a loopback address of the daemon's host and print\n" +
			"http://127.0.0.1:HOSTPORT/: the daemon carries every connection there to PORT inside the\n" +
			"sandbox (which needs network egress). Asking again prints the same; a fork child's ports are\n" +
			"its own; the address lives until the sandbox is removed or --close closes it. A sandbox\n" +
			"publishes at most 32 ports. The address takes no credential: any local user of the host\n" +
			"reaches it (docs/security.md).",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := strconv.Atoi(args[1])
			if err != nil || port < 1 || port > 65535 {
				return fmt.Errorf("PORT %q: want a number from 1 to 65535", args[1])
			}
			if closePort {
				return g.client().Unpublish(cmd.Context(), args[0], port)
			}
			p, err := g.client().Port(cmd.Context(), args[0], port)
			if err != nil {
				return err
			}
			return out.print(cmd, p, func(w io.Writer) { fmt.Fprintln(w, p.URL) }, nil)
		},
	}
	out = addOutput(cmd, singleCmd)
	cmd.Flags().BoolVar(&closePort, "close", false, "close the published port instead (its connections end), freeing its place")
	return cmd
}
