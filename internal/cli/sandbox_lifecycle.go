package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// The sandbox lifecycle commands beyond create and rm: pause, resume, timeout, restore, and
// the templates.

func newSandboxPauseCmd(g *globals) *cobra.Command {
	var out *Output
	cmd := &cobra.Command{
		Use:   "pause ID",
		Short: "Checkpoint a sandbox and stop it: it holds no CPU or memory until resume",
		Long: "Checkpoint the sandbox (tag \"pause\") and stop its engine: a paused sandbox holds no CPU or\n" +
			"memory, only its image. `zygo sandbox resume ID` restores it, resealed (same id, new\n" +
			"generation). Its timeout, if any, is cleared; resume sets it again.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stop := startProgress(cmd, "pausing "+args[0])
			rec, err := g.client().Pause(cmd.Context(), args[0])
			stop()
			if err != nil {
				return err
			}
			return out.print(cmd, rec, func(w io.Writer) { fmt.Fprintf(w, "%s paused (image %s)\n", rec.ID, rec.CheckpointID) }, nil)
		},
	}
	out = addOutput(cmd, singleCmd)
	return cmd
}

func newSandboxResumeCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	var out *Output
	cmd := &cobra.Command{
		Use:   "resume ID [--timeout DURATION]",
		Short: "Restore a paused sandbox, resealed (same id, new generation)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return usagef("--timeout %s: must not be negative", timeout)
			}
			stop := startProgress(cmd, "resuming "+args[0])
			rec, err := g.client().ResumeSandbox(cmd.Context(), args[0], timeout.Milliseconds())
			stop()
			if err != nil {
				return err
			}
			return out.print(cmd, rec, func(w io.Writer) { fmt.Fprintf(w, "%s resumed, generation %s\n", rec.ID, rec.Generation) }, nil)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "a new timeout counted from the resume (default: the sandbox's own)")
	out = addOutput(cmd, singleCmd)
	return cmd
}

func newSandboxTimeoutCmd(g *globals) *cobra.Command {
	var onTimeout string
	var out *Output
	cmd := &cobra.Command{
		Use:   "timeout ID DURATION [--on-timeout kill|pause]",
		Short: "Give a running sandbox a new timeout counted from now (0: none)",
		Long: "Give the sandbox a new timeout counted from now: past it, the sandbox is removed (kill, the\n" +
			"default) or paused. 0 removes the timeout. The deadline is kept in the daemon's store.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := time.ParseDuration(args[1])
			if err != nil || d < 0 {
				return usagef("DURATION %q: want a duration such as 10m or 1h30m (0: none)", args[1])
			}
			rec, err := g.client().SetTimeout(cmd.Context(), args[0], d.Milliseconds(), onTimeout)
			if err != nil {
				return nameFlags(err, []fieldFlag{{"on_timeout", "--on-timeout"}, {"timeout", "DURATION"}})
			}
			return out.print(cmd, rec, func(w io.Writer) { fmt.Fprintf(w, "%s expires %s\n", rec.ID, expires(rec)) }, nil)
		},
	}
	cmd.Flags().StringVar(&onTimeout, "on-timeout", "", "kill or pause (default: unchanged; kill for a sandbox that had none)")
	out = addOutput(cmd, singleCmd)
	return cmd
}

// expires is when a sandbox's timeout passes, for a line of text.
func expires(rec wire.Sandbox) string {
	if rec.ExpiresAt == nil {
		return "never"
	}
	return rec.ExpiresAt.Local().Format(time.RFC3339) + " (" + rec.Options.OnTimeout + ")"
}

func newSandboxRestoreCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	var onTimeout, name string
	var out *Output
	cmd := &cobra.Command{
		Use:   "restore CHECKPOINT [--timeout DURATION] [--on-timeout kill|pause] [--name NAME]",
		Short: "Restore a checkpoint into a new sandbox, resealed; the checkpoint may have outlived its sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return usagef("--timeout %s: must not be negative", timeout)
			}
			stop := startProgress(cmd, "restoring "+args[0])
			rec, err := g.client().Restore(cmd.Context(), args[0], wire.RestoreBody{TimeoutMS: timeout.Milliseconds(), OnTimeout: onTimeout, Name: name})
			stop()
			if err != nil {
				return nameFlags(err, []fieldFlag{{"on_timeout", "--on-timeout"}, {"timeout", "--timeout"}, {"name", "--name"}})
			}
			return out.print(cmd, rec, func(w io.Writer) { fmt.Fprintln(w, rec.ID) }, nil)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "the new sandbox ends this long after it starts (default: never)")
	cmd.Flags().StringVar(&onTimeout, "on-timeout", "", "kill (default) or pause, when the timeout passes")
	cmd.Flags().StringVar(&name, "name", "", "the new sandbox's name (none in use; default: the checkpoint's sandbox's name, a dash and 8 digits)")
	out = addOutput(cmd, singleCmd)
	return cmd
}

func newSandboxTemplatesCmd(g *globals) *cobra.Command {
	var out *Output
	cmd := &cobra.Command{
		Use:   "templates",
		Short: "List the templates sandboxes are created from by name (zygo sandbox create --template NAME)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ts, err := g.client().Templates(cmd.Context())
			if err != nil {
				return err
			}
			return out.print(cmd, ts, func(tw io.Writer) {
				fmt.Fprintln(tw, "NAME\tROOT\tDESCRIPTION")
				for _, t := range ts {
					root := t.RootfsDir
					if root == "" {
						root = "(default: the host's /usr)"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, root, t.Description)
				}
			}, func() []string {
				names := make([]string, len(ts))
				for i, t := range ts {
					names[i] = t.Name
				}
				return names
			})
		},
	}
	out = addOutput(cmd, listCmd)
	return cmd
}
