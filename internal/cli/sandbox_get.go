package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// newSandboxGetCmd is `zygo sandbox get ID`: one sandbox's record.
func newSandboxGetCmd(g *globals) *cobra.Command {
	var out *Output
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Show one sandbox's record (-o json: every field)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := g.client().GetSandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return out.print(cmd, r, func(w io.Writer) {
				fmt.Fprintf(w, "ID:\t%s\nName:\t%s\nState:\t%s\n", r.ID, r.Name, r.State)
				if r.Error != "" {
					fmt.Fprintf(w, "Error:\t%s\n", r.Error)
				}
				fmt.Fprintf(w, "Address:\t%s\nParent:\t%s\nCheckpoint:\t%s\nGeneration:\t%s\nCreated:\t%s (%s ago)\n",
					dash(r.Address), dash(r.ParentID), dash(r.CheckpointID), dash(r.Generation),
					r.CreatedAt.UTC().Format(timeFormat), age(r.CreatedAt))
			}, nil)
		},
	}
	out = addOutput(cmd, singleCmd)
	return cmd
}
