package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/internal/pool"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

func newUpCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "up [DIR | DIR/zygo.toml]",
		Short: "Deploy the function in DIR (it holds zygo.toml; default: the current directory)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			arg := "."
			if len(args) == 1 {
				arg = args[0]
			}
			dir, err := functionDir(arg)
			if err != nil {
				return err
			}
			if raw, err := os.ReadFile(filepath.Join(dir, "zygo.toml")); err == nil && pool.IsPool(raw) {
				return fmt.Errorf("%s/zygo.toml is a runtime pool (kind = \"pool\"): deploy it with zygo pool up %s", dir, arg)
			}
			res, err := g.client().DeployDir(cmd.Context(), dir)
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
			mode := res.Mode + " mode"
			if res.Fallback != "" { // the mode it is served in, not the one asked for
				mode = res.Mode + " → spawn fallback"
			}
			fmt.Fprintf(out, "%s: deployed %s (%s, ready in %d ms)\n", res.Name, short(res.Version), mode, res.ReadyMs)
			if res.Fallback != "" {
				fmt.Fprintf(out, "  fallback: %s\n", res.Fallback)
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

// functionDir returns the function directory that arg names: arg itself, or the directory
// of arg when arg is a zygo.toml. Anything else (another file, a directory without a
// zygo.toml, a path that is not there) is an error saying what to give instead.
func functionDir(arg string) (string, error) {
	st, err := os.Stat(arg)
	if err != nil {
		return "", fmt.Errorf("up: %w", err)
	}
	dir := arg
	if !st.IsDir() {
		if filepath.Base(arg) != "zygo.toml" {
			return "", fmt.Errorf("up: %s is a file: give the function's directory (the one holding zygo.toml)", arg)
		}
		dir = filepath.Dir(arg)
	}
	if _, err := os.Stat(filepath.Join(dir, "zygo.toml")); err != nil {
		return "", fmt.Errorf("up: %s has no zygo.toml: give the function's directory (the one holding zygo.toml)", dir)
	}
	return dir, nil
}

func short(version string) string {
	if len(version) > 19 {
		return version[:19]
	}
	return version
}
