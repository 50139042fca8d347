package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

func newUpCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "up [DIR | DIR/zygo.toml]",
		Short: "Deploy the function in DIR (it holds zygo.toml; default: the current directory)",
		Long: "Deploy the function in DIR: upload it, import it in a new sandbox, run the warm-up checks, then\n" +
			"move traffic to it (the previous version drains). The steps are shown as they happen (a spinner\n" +
			"on a terminal, one line each on stderr otherwise). Ctrl-C cancels the deploy: the new version is\n" +
			"stopped on the daemon and the previous one keeps serving.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			arg := "."
			if len(args) == 1 {
				arg = args[0]
			}
			dir, err := functionDir(arg)
			if err != nil {
				return err
			}
			name := filepath.Base(dir)
			if man, err := function.LoadManifest(dir); err == nil { // the daemon says what is wrong with it
				name = man.Name
			}
			p := newDeployProgress(cmd, name)
			res, err := g.client().DeployDirStream(cmd.Context(), dir, p.update)
			p.stop()
			if err != nil {
				return deployFailed(cmd, g.client(), name, err)
			}
			printDeployed(cmd, res, "deployed")
			return nil
		},
	}
}

// deployFailed explains a failed deploy or rollback of name: an import failure with its
// traceback, and a cancelled one (Ctrl-C) with what still serves.
func deployFailed(cmd *cobra.Command, c *zygo.Client, name string, err error) error {
	var ae *zygo.Error
	if errors.As(err, &ae) && ae.Code == wire.CodeImportFailed {
		return fmt.Errorf("%s\n%s", ae.Message, ae.Traceback)
	}
	if !errors.Is(err, context.Canceled) || cmd.Context().Err() == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, ferr := c.Function(ctx, name)
	switch {
	case ferr == nil && f.State != function.StateDeploying:
		return fmt.Errorf("deploy cancelled; %q still serves version %s", name, short(f.Version))
	case ferr == nil || zygo.IsNotFound(ferr):
		return fmt.Errorf("deploy cancelled; %q had no earlier version, so nothing serves it", name)
	}
	return fmt.Errorf("deploy cancelled; %q: %w", name, ferr)
}

// printDeployed prints the result of a deploy or rollback (done: "deployed", "rolled back to").
func printDeployed(cmd *cobra.Command, res wire.DeployResult, done string) {
	out := cmd.OutOrStdout()
	if res.Unchanged {
		fmt.Fprintf(out, "%s: %s is already active\n", res.Name, short(res.Version))
		return
	}
	mode := res.Mode + " mode"
	if res.Fallback != "" { // the mode it is served in, not the one asked for
		mode = res.Mode + " → spawn fallback"
	}
	fmt.Fprintf(out, "%s: %s %s (%s, ready in %d ms)\n", res.Name, done, short(res.Version), mode, res.ReadyMs)
	if res.Fallback != "" {
		fmt.Fprintf(out, "  fallback: %s\n", res.Fallback)
	}
	for _, c := range res.Checks {
		if c.Level == "warn" {
			fmt.Fprintf(out, "  warning: %s: %s\n", c.Name, c.Detail)
		}
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
