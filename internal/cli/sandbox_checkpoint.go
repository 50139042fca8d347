package cli

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

func newSandboxCheckpointCmd(g *globals) *cobra.Command {
	var tag string
	var out *Output
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
			return out.print(cmd, cp, func(w io.Writer) { fmt.Fprintln(w, cp.ID) }, nil)
		},
	}
	cmd.Flags().StringVar(&tag, "tag", "", "a tag to find the checkpoint by (the newest with a tag wins)")
	out = addOutput(cmd, singleCmd)
	return cmd
}

func newSandboxCheckpointsCmd(g *globals) *cobra.Command {
	var out *Output
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
			return out.print(cmd, cps, func(tw io.Writer) {
				fmt.Fprintln(tw, "ID\tTAG\tSANDBOX\tPARENT\tSIZE\tAGE")
				for _, c := range cps {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, dash(c.Tag), c.SandboxID, dash(c.ParentID),
						humanize.IBytes(uint64(c.SizeBytes)), age(c.CreatedAt))
				}
			}, func() []string {
				ids := make([]string, len(cps))
				for i, c := range cps {
					ids[i] = c.ID
				}
				return ids
			})
		},
	}
	out = addOutput(cmd, listCmd)
	out.addJSONAlias(cmd)
	cmd.AddCommand(newCheckpointExportCmd(g), newCheckpointImportCmd(g))
	cmd.AddCommand(&cobra.Command{
		Use:   "rm CHECKPOINT...",
		Short: "Delete checkpoints; refused while a sandbox was restored from one or a checkpoint descends from it",
		Long: "Delete checkpoints (ids or tags). One is refused while a sandbox was restored from it or a\n" +
			"checkpoint was taken of such a sandbox (every fork without --from takes one). Within one call\n" +
			"the checkpoints are removed children first, so a parent named with its children goes too.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all, err := g.client().Checkpoints(cmd.Context(), ""); err == nil {
				args = childrenFirst(args, all)
			} // else each removal below reports the daemon's error
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

// childrenFirst returns refs (checkpoint ids or tags) ordered so that a checkpoint comes
// before its ancestors among refs: each is removed before the parent whose removal it would
// block. Refs that match no checkpoint of all keep their place relative to each other, first.
func childrenFirst(refs []string, all []wire.Checkpoint) []string {
	byID := make(map[string]wire.Checkpoint, len(all))
	byTag := map[string]wire.Checkpoint{} // the newest with a tag wins, as the daemon resolves it
	for _, c := range all {
		byID[c.ID] = c
		if t, ok := byTag[c.Tag]; c.Tag != "" && (!ok || c.CreatedAt.After(t.CreatedAt)) {
			byTag[c.Tag] = c
		}
	}
	depth := func(ref string) int {
		c, ok := byID[ref]
		if !ok {
			if c, ok = byTag[ref]; !ok {
				return -1
			}
		}
		d := 0
		for seen := map[string]bool{}; c.ParentID != "" && !seen[c.ID]; d++ {
			seen[c.ID] = true
			if c, ok = byID[c.ParentID]; !ok {
				break
			}
		}
		return d
	}
	out := slices.Clone(refs)
	depths := make(map[string]int, len(refs))
	for _, r := range refs {
		depths[r] = depth(r)
	}
	sort.SliceStable(out, func(i, j int) bool {
		di, dj := depths[out[i]], depths[out[j]]
		if (di < 0) != (dj < 0) {
			return di < 0
		}
		return di > dj
	})
	return out
}

func newSandboxForkCmd(g *globals) *cobra.Command {
	var n int
	var out *Output
	var from string
	var names []string
	cmd := &cobra.Command{
		Use:   "fork ID -n N [--from CHECKPOINT] [--name NAME]...",
		Short: "Restore N resealed copies of a sandbox in parallel and print their ids",
		Long: "Restore N children of the sandbox in parallel, from a fresh checkpoint (or --from), and reseal\n" +
			"each one before it is usable. The ids of the children that run are printed on stdout, one a\n" +
			"line; each child that failed is reported on stderr with its cause (it was destroyed), and the\n" +
			"exit status is 1 when any failed. N is at most 16. --name, once per child, names the children\n" +
			"(N defaults to the number of names); without it each is named after its parent.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(names) > 0 && !cmd.Flags().Changed("n") {
				n = len(names)
			}
			bar := startForkProgress(cmd, args[0], n, from)
			t0 := time.Now()
			ans, err := g.client().ForkWith(cmd.Context(), args[0], wire.ForkBody{N: n, From: from, Names: names}, bar.update)
			bar.stop()
			var ae *zygo.Error
			if err != nil && (!errors.As(err, &ae) || len(ans.Children) == 0) {
				return err
			}
			if out.JSON() {
				if err := printJSON(cmd, ans); err != nil {
					return err
				}
			} else {
				for _, c := range ans.Children {
					if c.Sandbox != nil {
						fmt.Fprintln(cmd.OutOrStdout(), c.Sandbox.ID)
					}
				}
			}
			for _, c := range ans.Children {
				if c.Error != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "child %d failed: %s\n", c.Index, c.Error.Text())
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
	cmd.Flags().StringArrayVar(&names, "name", nil, "a child's name, once per child in order (none in use; nothing is made otherwise)")
	out = addOutput(cmd, singleCmd)
	return cmd
}

func newSandboxRollbackCmd(g *globals) *cobra.Command {
	var to string
	var out *Output
	cmd := &cobra.Command{
		Use:   "rollback ID --to CHECKPOINT",
		Short: "Replace a sandbox with a restore of a checkpoint, keeping its id (a new generation)",
		Long: "Replace the sandbox's running copy with a resealed restore of CHECKPOINT: anything written\n" +
			"since is gone, the id and name stay, the generation is new. On failure the sandbox keeps\n" +
			"running as it was.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return usagef("rollback needs --to CHECKPOINT")
			}
			stop := startProgress(cmd, "rolling "+args[0]+" back to "+to)
			rec, err := g.client().Rollback(cmd.Context(), args[0], to)
			stop()
			if err != nil {
				return err
			}
			return out.print(cmd, rec, func(w io.Writer) {
				fmt.Fprintf(w, "%s rolled back to %s, generation %s\n", rec.ID, rec.CheckpointID, rec.Generation)
			}, nil)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the checkpoint (id or tag)")
	out = addOutput(cmd, singleCmd)
	return cmd
}
