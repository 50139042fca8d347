package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
)

func newStatusCmd(g *globals) *cobra.Command {
	var out *Output
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show whether a daemon answers (exit status 1 when none does)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := g.client().Status(cmd.Context())
			if err != nil {
				return err
			}
			return out.print(cmd, st, func(w io.Writer) {
				fmt.Fprintf(w, "zygo daemon %s: up %s, %d functions\n",
					st.Version, (time.Duration(st.UptimeMs) * time.Millisecond).Round(time.Second), st.Functions)
			}, nil)
		},
	}
	out = addOutput(cmd, singleCmd)
	return cmd
}
