package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
)

func newVersionsCmd(g *globals) *cobra.Command {
	var out *Output
	cmd := &cobra.Command{
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
			return out.print(cmd, vs, func(tw io.Writer) {
				fmt.Fprintln(tw, "VERSION\tDEPLOYED\tCREATED\tACTIVE")
				for _, v := range vs {
					active := ""
					if v.Active {
						active = "*"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Hash, v.DeployedAt.Local().Format(time.DateTime), v.CreatedAt.Local().Format(time.DateTime), active)
				}
			}, func() []string {
				ids := make([]string, len(vs))
				for i, v := range vs {
					ids[i] = v.Hash
				}
				return ids
			})
		},
	}
	out = addOutput(cmd, listCmd)
	return cmd
}
