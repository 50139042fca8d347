package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func newVersionsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "versions NAME",
		Short: "List a function's stored versions, the most recently deployed first",
		Long: "List a function's stored versions (hash, when first stored, when last deployed, which is\n" +
			"active), the most recently deployed first: `zygo rollback NAME` goes to the first one that is\n" +
			"not active. The daemon keeps --keep-versions of them per function.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			vs, err := g.client().FunctionVersions(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tDEPLOYED\tCREATED\tACTIVE")
			for _, v := range vs {
				active := ""
				if v.Active {
					active = "*"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Hash, v.DeployedAt.Local().Format(time.DateTime), v.CreatedAt.Local().Format(time.DateTime), active)
			}
			return tw.Flush()
		},
	}
}
