package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func newStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show whether a daemon answers (exit status 1 when none does)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := g.client().Status(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "zygo daemon %s: up %s, %d functions\n",
				st.Version, (time.Duration(st.UptimeMs) * time.Millisecond).Round(time.Second), st.Functions)
			return nil
		},
	}
}
