package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/BurntSushi/toml"
	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

func newUpCmd(g *globals) *cobra.Command {
	var output *Output
	cmd := &cobra.Command{
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
			mname, kind := manifestOf(dir)
			if kind == "pool" {
				return fmt.Errorf("%s/zygo.toml is a runtime pool (kind = \"pool\"): deploy it with zygo pool up %s", dir, arg)
			}
			name := filepath.Base(dir)
			if mname != "" { // else the daemon says what is wrong with the manifest
				name = mname
			}
			p := newDeployProgress(cmd, name)
			res, err := g.client().DeployDirStream(cmd.Context(), dir, p.update)
			p.stop()
			if err != nil {
				return deployFailed(cmd, g.client(), name, err, leftOutHint(dir))
			}
			if output.JSON() {
				return printJSON(cmd, res)
			}
			printDeployed(cmd, res, "deployed")
			return nil
		},
	}
	output = addOutput(cmd, singleCmd)
	return cmd
}

// stateDeploying is the state the daemon lists a function in while its first version starts
// (function.StateDeploying; the CLI does not import the daemon's packages, so that it builds
// for darwin and windows).
const stateDeploying = "deploying"

// manifestOf returns the name and kind ("pool" for a runtime pool, else "") dir's zygo.toml
// gives; both "" when it cannot be read (a deploy then fails with the daemon's own words
// about it).
func manifestOf(dir string) (name, kind string) {
	var m struct {
		Name string `toml:"name"`
		Kind string `toml:"kind"`
	}
	if _, err := toml.DecodeFile(filepath.Join(dir, "zygo.toml"), &m); err != nil {
		return "", ""
	}
	return m.Name, m.Kind
}

// deployFailed explains a failed deploy or rollback of name: an import failure with its
// traceback, and a cancelled one (Ctrl-C) with what still serves.
func deployFailed(cmd *cobra.Command, c *zygo.Client, name string, err error, hint string) error {
	var ae *zygo.Error
	if errors.As(err, &ae) && ae.Code == wire.CodeImportFailed {
		return fmt.Errorf("%s\n%s%s", ae.Message, ae.Traceback, hint)
	}
	if !errors.Is(err, context.Canceled) || cmd.Context().Err() == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, ferr := c.Function(ctx, name)
	switch {
	case ferr == nil && f.State != stateDeploying:
		return fmt.Errorf("deploy cancelled; %q still serves version %s", name, short(f.Version))
	case ferr == nil || zygo.IsNotFound(ferr):
		return fmt.Errorf("deploy cancelled; %q had no earlier version, so nothing serves it", name)
	}
	return fmt.Errorf("deploy cancelled; %q: %w", name, ferr)
}

// printDeployed prints the result of a deploy or rollback (done: "deployed", "rolled back to").
func printDeployed(cmd *cobra.Command, res wire.DeployResult, done string) {
	out := cmd.OutOrStdout()
	for _, w := range res.Warnings { // on stderr: a script reading stdout still gets its line
		fmt.Fprintf(cmd.ErrOrStderr(), "zygo: warning: %s\n", w)
	}
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

// leftOutHint returns, for a deploy whose import failed, a note on the directories of dir that
// hold dependencies and that PackDir left out by default (zygo.DefaultIgnores), with what to do
// instead; "" when there are none.
func leftOutHint(dir string) string {
	var out strings.Builder
	for _, c := range []struct{ name, hint string }{
		{"node_modules", "add !node_modules/ to .zygoignore to ship it"},
		{".venv", "ship the packages in the function (pip install --target vendor, then python_path = [\"vendor\"] in zygo.toml), " +
			"or name a virtual environment outside the function as its interpreter"},
	} {
		if st, err := os.Stat(filepath.Join(dir, c.name)); err != nil || !st.IsDir() {
			continue
		}
		if packed, err := zygo.Packed(dir, c.name, true); err == nil && !packed {
			fmt.Fprintf(&out, "\nnote: %s was not uploaded (left out by default): %s", c.name, c.hint)
		}
	}
	return out.String()
}
