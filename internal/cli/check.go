//go:build linux

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/internal/daemon"
	"github.com/zygo-run/zygo/internal/forkcheck"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

func newCheckCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check",
		Short: "The fork-safety auditor: copy probes N ways and print which values repeat",
		Long: "zygo check runs probe programs, copies them N ways and prints, row by row, which values\n" +
			"repeat across the copies. Each row has an expectation (differs, same, or documented);\n" +
			"the exit status is 1 when any row fails.",
	}
	cmd.AddCommand(newCheckFunctionsCmd(g), newCheckSandboxesCmd(g), newCheckPoolsCmd(g))
	return cmd
}

func newCheckFunctionsCmd(g *globals) *cobra.Command {
	var n int
	var useDaemon, noNode bool
	var out *Output
	cmd := &cobra.Command{
		Use:   "functions",
		Short: "Audit warm functions: probe functions in each runtime, invoked N times sequentially and concurrently",
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
			probes, err := forkcheck.BuiltinProbes(work, !noNode)
			if err != nil {
				return err
			}
			asJSON := out.JSON()
			if !asJSON {
				fmt.Fprintf(cmd.ErrOrStderr(), "zygo check functions: deploying %d probes, invoking each %d times sequentially and %d at once...\n", len(probes), n, n)
			}
			rep, err := forkcheck.RunFunctions(cmd.Context(), client, probes, filepath.Join(work, "probes", "secret"), n)
			if err != nil {
				return err
			}
			return printReport(cmd.OutOrStdout(), asJSON, rep, rep.Rows,
				fmt.Sprintf("zygo check functions: %d copies per series", n), rep.Series)
		},
	}
	cmd.Flags().IntVarP(&n, "n", "n", 11, "copies per series (2..256)")
	out = addOutput(cmd, singleCmd)
	out.addJSONAlias(cmd)
	cmd.Flags().BoolVar(&useDaemon, "use-daemon", false, "use the daemon at --state-dir instead of a private one")
	cmd.Flags().BoolVar(&noNode, "no-node", false, "skip the Node probe")
	return cmd
}

func printReport(w io.Writer, asJSON bool, rep any, rows []forkcheck.Row, title string, series []string) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		forkcheck.PrintTable(w, title, series, rows)
	}
	if c := forkcheck.Tally(rows); c.Failed() {
		return &exitError{code: 1, err: fmt.Errorf("%d rows failed, %d missing", c.Fail, c.Missing)}
	}
	return nil
}

// checkDaemon returns a client for the daemon the check runs against: a
// private one on a fresh state dir under work (the default), or the one at
// --state-dir. stop shuts the private daemon down.
func checkDaemon(ctx context.Context, g *globals, useExisting bool, work string) (*zygo.Client, func(), error) {
	if useExisting {
		c := g.client()
		if _, err := c.Status(ctx); err != nil {
			return nil, nil, err
		}
		return c, func() {}, nil
	}
	state := filepath.Join(work, "state")
	if err := os.MkdirAll(state, 0o711); err != nil {
		return nil, nil, err
	}
	if err := os.Chmod(work, 0o711); err != nil {
		return nil, nil, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	stopDaemon, err := daemon.Background(ctx, daemon.Config{StateDir: state, Log: log, Sandbox: daemon.SandboxConfig{Disabled: true}})
	if err != nil {
		return nil, nil, err
	}
	stop := func() { _ = stopDaemon() }
	return zygo.NewClient(daemon.SocketPath(state)), stop, nil
}
