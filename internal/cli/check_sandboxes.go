//go:build linux

package cli

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/internal/forkcheck"
)

func newCheckSandboxesCmd(_ *globals) *cobra.Command {
	var n int
	var control bool
	var output *Output
	var timer time.Duration
	var engine forkcheck.EngineConfig
	cmd := &cobra.Command{
		Use:   "sandboxes",
		Short: "Audit sandboxes: probes in one running sandbox, checkpointed, forked and rolled back N ways",
		Long: "zygo check sandboxes starts long-lived Python, Node and Go probes in a fresh gVisor sandbox,\n" +
			"checkpoints it and makes N copies of that instant: forks of 3 until N-2, then 2 rollbacks of the\n" +
			"source (N=11: 3 forks of 3 and 2 rollbacks, as in the seed experiment). In each copy the probes,\n" +
			"new processes and the code interpreter draw random values and read the copy's identity, clocks,\n" +
			"a buffered line and a connection; the table says, row by row, what repeats.\n\n" +
			"It runs on a private sandbox engine of its own (a temporary state dir), not on the daemon's\n" +
			"sandboxes. Needs root, runsc (scripts/install-runsc.sh) and a zygo-guest built by make build.\n" +
			"The exit status is 1 when any row fails.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n < 2 || n > forkcheck.MaxSandboxCopies {
				return fmt.Errorf("-n %d: must be 2..%d", n, forkcheck.MaxSandboxCopies)
			}
			eng, err := forkcheck.NewSandboxEngine(engine)
			if err != nil {
				return err
			}
			defer func() {
				if cerr := eng.Close(); cerr != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), "zygo check sandboxes:", cerr)
				}
			}()
			// Progress goes to stderr in both modes: a run takes tens of seconds.
			opts := forkcheck.SandboxOptions{N: n, Timer: timer, Progress: cmd.ErrOrStderr()}
			if control {
				opts.Specs = forkcheck.WithSandboxControl(forkcheck.SandboxSpecs)
			}
			rep, err := forkcheck.RunSandboxes(cmd.Context(), eng.Manager, opts)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if output.JSON() {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				forkcheck.PrintSandboxTable(out, fmt.Sprintf("zygo check sandboxes: %d copies of one running sandbox (%s)", n, rep.Shape), rep)
			}
			if c := forkcheck.Tally(rep.Rows); c.Failed() {
				return &exitError{code: 1, err: fmt.Errorf("%d rows failed, %d missing", c.Fail, c.Missing)}
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&n, "n", "n", 11, fmt.Sprintf("copies (2..%d)", forkcheck.MaxSandboxCopies))
	output = addOutput(cmd, singleCmd)
	output.addJSONAlias(cmd)
	cmd.Flags().DurationVar(&timer, "timer", 10*time.Second, "the timer the Python probe arms before the checkpoint; it must still be pending then")
	cmd.Flags().StringVar(&engine.GuestBinary, "guest-binary", "", "static zygo-guest (default: next to zygo, then PATH)")
	cmd.Flags().StringVar(&engine.Runsc, "runsc", "", "runsc binary (default /usr/local/bin/runsc, then PATH)")
	cmd.Flags().BoolVar(&control, "control", false, "add a row built to repeat (a fixed seed), to see the check fail")
	_ = cmd.Flags().MarkHidden("control")
	return cmd
}
