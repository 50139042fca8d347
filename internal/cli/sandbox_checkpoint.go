package cli

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/sdk/go/zygo"
)

func newSandboxCheckpointCmd(g *globals) *cobra.Command {
	var tag string
	cmd := &cobra.Command{
		Use:   "checkpoint ID [--tag TAG]",
		Short: "Save an immutable image of a running sandbox and print its id; the sandbox keeps running",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stop := startProgress(cmd, "checkpointing "+args[0])
			cp, err := g.client().Checkpoint(cmd.Context(), args[0], tag)
			stop()
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), cp.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&tag, "tag", "", "a tag to find the checkpoint by (the newest with a tag wins)")
	return cmd
}

func newSandboxCheckpointsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "checkpoints [ID]",
		Short: "List checkpoints (of one sandbox, or all) with their size and age",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			cps, err := g.client().Checkpoints(cmd.Context(), id)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd, cps)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTAG\tSANDBOX\tPARENT\tSIZE\tAGE")
			for _, c := range cps {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, dash(c.Tag), c.SandboxID, dash(c.ParentID),
					humanize.IBytes(uint64(c.SizeBytes)), age(c.CreatedAt))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the records as JSON")
	cmd.AddCommand(&cobra.Command{
		Use:   "rm CHECKPOINT...",
		Short: "Delete checkpoints; refused while a sandbox was restored from one or a checkpoint descends from it",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			failed := 0
			for _, id := range args {
				if err := g.client().RemoveCheckpoint(cmd.Context(), id); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "zygo: removing %s: %v\n", id, err)
					failed++
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", id)
			}
			if failed > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d of %d checkpoints not removed", failed, len(args))}
			}
			return nil
		},
	})
	return cmd
}

func newSandboxForkCmd(g *globals) *cobra.Command {
	var n int
	var from string
	cmd := &cobra.Command{
		Use:   "fork ID -n N [--from CHECKPOINT]",
		Short: "Restore N resealed copies of a sandbox in parallel and print their ids",
		Long: "Restore N children of the sandbox in parallel, from a fresh checkpoint (or --from), and reseal\n" +
			"each one before it is usable. The ids of the children that run are printed on stdout, one a\n" +
			"line; each child that failed is reported on stderr with its cause (it was destroyed), and the\n" +
			"exit status is 1 when any failed. N is at most 16.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bar := startForkProgress(cmd, args[0], n, from)
			t0 := time.Now()
			ans, err := g.client().Fork(cmd.Context(), args[0], n, from, bar.update)
			bar.stop()
			var ae *zygo.Error
			if err != nil && (!errors.As(err, &ae) || len(ans.Children) == 0) {
				return err
			}
			for _, c := range ans.Children {
				if c.Sandbox != nil {
					fmt.Fprintln(cmd.OutOrStdout(), c.Sandbox.ID)
				}
			}
			for _, c := range ans.Children {
				if c.Error != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "child %d failed: %s\n", c.Index, c.Error.Message)
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "forked %s from %s: %d of %d children running in %s\n",
				args[0], ans.Checkpoint.ID, ans.Succeeded, len(ans.Children), time.Since(t0).Round(time.Millisecond))
			if ans.Failed > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d of %d children failed", ans.Failed, len(ans.Children))}
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&n, "n", "n", 1, "how many children (1..16)")
	cmd.Flags().StringVar(&from, "from", "", "restore this checkpoint (id or tag) instead of taking a new one")
	return cmd
}

func newSandboxRollbackCmd(g *globals) *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "rollback ID --to CHECKPOINT",
		Short: "Replace a sandbox with a restore of a checkpoint, keeping its id (a new generation)",
		Long: "Replace the sandbox's running copy with a resealed restore of CHECKPOINT: anything written\n" +
			"since is gone, the id and name stay, the generation is new. On failure the sandbox keeps\n" +
			"running as it was.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return errors.New("rollback needs --to CHECKPOINT")
			}
			stop := startProgress(cmd, "rolling "+args[0]+" back to "+to)
			rec, err := g.client().Rollback(cmd.Context(), args[0], to)
			stop()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s rolled back to %s, generation %s\n", rec.ID, rec.CheckpointID, rec.Generation)
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the checkpoint (id or tag)")
	return cmd
}
