package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// newPoolCmd is `zygo pool`: runtime pools (a zygote that preloads
// libraries and runs tenants' scripts).
func newPoolCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "Runtime pools: one zygote preloads libraries, tenants' scripts run in its children",
	}
	cmd.AddCommand(newPoolUpCmd(g), newPoolRunCmd(g), newPoolLsCmd(g), newPoolRmCmd(g), newPoolLogsCmd(g))
	return cmd
}

func newPoolUpCmd(g *globals) *cobra.Command {
	var out *Output
	cmd := &cobra.Command{
		Use:   "up DIR",
		Short: "Create or replace a pool from DIR/zygo.toml (kind = \"pool\")",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := os.ReadFile(filepath.Join(args[0], "zygo.toml"))
			if err != nil {
				return fmt.Errorf("reading the pool's manifest: %w", err)
			}
			res, err := g.client().PoolUp(cmd.Context(), raw)
			if err != nil {
				return describeInvokeError(err)
			}
			if out.JSON() {
				return printJSON(cmd, res)
			}
			state := "up"
			if res.Unchanged {
				state = "unchanged"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pool %s %s (isolation %s)\n", res.Name, state, res.Isolation)
			if res.Fallback != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", res.Fallback)
			}
			for _, c := range res.Checks {
				if c.Level == "warn" {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s: %s\n", c.Name, c.Detail)
				}
			}
			return nil
		},
	}
	out = addOutput(cmd, singleCmd)
	return cmd
}

func newPoolRunCmd(g *globals) *cobra.Command {
	var tenant, script, hash, entry, data string
	var secrets []string
	cmd := &cobra.Command{
		Use:   "run NAME --tenant T (--script FILE|DIR | --hash H) [--entry MODULE:FUNC] [--data EVENT]",
		Short: "Run a tenant's script in a pool and print its JSON result",
		Long: "Upload the script (a file, stored as main.py, or a directory) for the tenant unless\n" +
			"--hash names one already uploaded, then run its entry point (default main:handler)\n" +
			"with the event. The script's hash is printed on stderr: pass it as --hash next time.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (script == "") == (hash == "") {
				return usagef("--script and --hash: give exactly one")
			}
			event, err := readData(data, cmd.InOrStdin())
			if err != nil {
				return err
			}
			c := g.client()
			if script != "" {
				up, err := c.PutScript(cmd.Context(), args[0], tenant, script)
				if err != nil {
					return flagError(err, "--script")
				}
				hash = up.Hash
			}
			res, err := c.RunScript(cmd.Context(), args[0], wire.PoolRunRequest{Tenant: tenant, Script: hash,
				Entry: entry, Event: event, Secrets: secrets})
			if err != nil {
				return describeInvokeError(err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "script %s (request %s, %s)\n", res.Script, res.RequestID, res.Lane)
			fmt.Fprintln(cmd.OutOrStdout(), string(res.Value))
			return nil
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant id ([a-z0-9-], 1-63)")
	cmd.Flags().StringVar(&script, "script", "", "the script: a .py file (stored as main.py) or a directory")
	cmd.Flags().StringVar(&hash, "hash", "", "a script the tenant uploaded before (its hash)")
	cmd.Flags().StringVar(&entry, "entry", "", "the entry point MODULE:FUNCTION (default main:handler)")
	cmd.Flags().StringVarP(&data, "data", "d", "{}", "the event: JSON text, @FILE, or - for stdin")
	cmd.Flags().StringArrayVar(&secrets, "secret", nil, "a secret of the tenant for this run (zygo secret set --tenant), repeatable")
	_ = cmd.MarkFlagRequired("tenant")
	return cmd
}

// flagError names flag in a bad-request error about the script.
func flagError(err error, flag string) error {
	if zygo.IsBadRequest(err) {
		return fmt.Errorf("%s: %w", flag, err)
	}
	return err
}

func newPoolLsCmd(g *globals) *cobra.Command {
	var out *Output
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List pools and their zygotes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ps, err := g.client().Pools(cmd.Context())
			if err != nil {
				return err
			}
			return out.print(cmd, ps, func(tw io.Writer) {
				fmt.Fprintln(tw, "NAME\tISOLATION\tPRELOAD\tZYGOTES\tRUNNING\tWAITING\tTENANTS")
				for _, p := range ps {
					lanes := make([]string, len(p.Lanes))
					for i, l := range p.Lanes {
						lanes[i] = l.Lane + ":" + l.State
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\n", p.Name, p.Isolation, strings.Join(p.Preload, ","),
						strings.Join(lanes, " "), p.Running, p.Waiting, p.Tenants)
				}
			}, func() []string {
				names := make([]string, len(ps))
				for i, p := range ps {
					names[i] = p.Name
				}
				return names
			})
		},
	}
	out = addOutput(cmd, listCmd)
	return cmd
}

func newPoolRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a pool, its zygotes and its tenants' scripts",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.client().RemovePool(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pool %s removed\n", args[0])
			return nil
		},
	}
}

func newPoolLogsCmd(g *globals) *cobra.Command {
	var request string
	var out *Output
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print a pool's logs: each request's output and Zygo's line about it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			var after int64
			for {
				body, err := c.PoolLogs(cmd.Context(), args[0], zygo.LogsQuery{RequestID: request, After: after})
				if err != nil {
					return err
				}
				if err := printLogs(cmd.OutOrStdout(), body, out.JSON()); err != nil {
					return err
				}
				if len(body.Lines) == 0 {
					return nil
				}
				after = body.Next
			}
		},
	}
	cmd.Flags().StringVar(&request, "request", "", "only lines of this request id")
	out = addOutput(cmd, singleCmd)
	return cmd
}
