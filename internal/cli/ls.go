package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List deployed functions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fns, err := g.client().Functions(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tRUNTIME\tMODE\tSTATE\tIN FLIGHT\tQUEUED\tSERVED")
			for _, f := range fns {
				state := f.State
				if f.Deploying != "" {
					state += " (deploying " + short(f.Deploying) + ")"
				}
				mode := string(f.Mode)
				if f.Fallback != "" {
					mode += " (fallback: spawn)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", f.Name, short(f.Version), f.Runtime, mode, state, f.InFlight, f.Queued, f.Served)
			}
			return tw.Flush()
		},
	}
}
