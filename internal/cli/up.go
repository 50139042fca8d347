package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/sdk/go/zygo"
)

func newUpCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "up DIR",
		Short: "Deploy the function in DIR (it holds zygo.toml)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().DeployDir(cmd.Context(), args[0])
			if err != nil {
				var ae *zygo.Error
				if errors.As(err, &ae) && ae.Code == "import_failed" {
					return fmt.Errorf("%s\n%s", ae.Message, ae.Traceback)
				}
				return err
			}
			out := cmd.OutOrStdout()
			if res.Unchanged {
				fmt.Fprintf(out, "%s: %s is already active\n", res.Name, short(res.Version))
				return nil
			}
			fmt.Fprintf(out, "%s: deployed %s (%s mode, ready in %d ms)\n", res.Name, short(res.Version), res.Mode, res.ReadyMs)
			if res.Fallback != "" {
				fmt.Fprintf(out, "  warning: %s\n", res.Fallback)
			}
			for _, c := range res.Checks {
				if c.Level == "warn" {
					fmt.Fprintf(out, "  warning: %s: %s\n", c.Name, c.Detail)
				}
			}
			return nil
		},
	}
}

func short(version string) string {
	if len(version) > 19 {
		return version[:19]
	}
	return version
}
