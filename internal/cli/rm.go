package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Stop and delete a function, its versions and its logs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.client().RemoveFunction(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: removed\n", args[0])
			return nil
		},
	}
}
