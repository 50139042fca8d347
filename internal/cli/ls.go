package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

func newLsCmd(g *globals) *cobra.Command {
	var out *Output
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List deployed functions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fns, err := g.client().Functions(cmd.Context())
			if err != nil {
				return err
			}
			return out.print(cmd, fns, func(tw io.Writer) {
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
			}, func() []string {
				names := make([]string, len(fns))
				for i, f := range fns {
					names[i] = f.Name
				}
				return names
			})
		},
	}
	out = addOutput(cmd, listCmd)
	return cmd
}
