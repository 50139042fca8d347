//go:build linux

package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/internal/forkcheck"
)

func newCheckPoolsCmd(g *globals) *cobra.Command {
	var n int
	var useDaemon bool
	var out *Output
	cmd := &cobra.Command{
		Use:   "pools",
		Short: "Audit runtime pools: two tenants share a pool; each round one plants, the other looks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n < 2 || n > 256 {
				return fmt.Errorf("-n %d: must be 2..256", n)
			}
			work, err := os.MkdirTemp("", "zygo-check-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(work)
			client, stop, err := checkDaemon(cmd.Context(), g, useDaemon, work)
			if err != nil {
				return err
			}
			defer stop()
			asJSON := out.JSON()
			if !asJSON {
				fmt.Fprintf(cmd.ErrOrStderr(), "zygo check pools: pools %s and %s, %d rounds of tenant %s planting and %s looking...\n",
					forkcheck.PoolShared, forkcheck.PoolPerTenant, n, "check-a", "check-b")
			}
			rep, err := forkcheck.RunPools(cmd.Context(), client, n)
			if err != nil {
				return err
			}
			return printReport(cmd.OutOrStdout(), asJSON, rep, rep.Rows, fmt.Sprintf("zygo check pools: %d rounds", n), rep.Series)
		},
	}
	cmd.Flags().IntVarP(&n, "n", "n", 5, "rounds (2..256)")
	out = addOutput(cmd, singleCmd)
	out.addJSONAlias(cmd)
	cmd.Flags().BoolVar(&useDaemon, "use-daemon", false, "use the daemon at --state-dir instead of a private one")
	return cmd
}
