package cli

import (
	"fmt"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// startProgress shows a spinner with the elapsed time on stderr while a long call (checkpoint,
// rollback) runs, only when stdout is a terminal; the returned func clears it. The API answers
// these calls once, at the end, so there is no count to show.
func startProgress(cmd *cobra.Command, desc string) (stop func()) {
	if !stdoutIsTerminal(cmd) {
		return func() {}
	}
	bar := progressbar.NewOptions(-1,
		progressbar.OptionSetWriter(cmd.ErrOrStderr()),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetSpinnerChangeInterval(100*time.Millisecond),
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionClearOnFinish(),
	)
	return func() {
		_ = bar.Finish()
		_ = bar.Clear()
	}
}

// forkProgress shows a fork on stderr when stdout is a terminal: a spinner while the checkpoint
// is taken, then a bar of the children ready (or failed) out of N, as the daemon streams them.
type forkProgress struct {
	cmd     *cobra.Command
	id      string
	n       int
	spinner func() // the checkpoint spinner, until the first progress event
	bar     *progressbar.ProgressBar
}

func startForkProgress(cmd *cobra.Command, id string, n int, from string) *forkProgress {
	p := &forkProgress{cmd: cmd, id: id, n: n, spinner: func() {}}
	if stdoutIsTerminal(cmd) {
		what := "forking " + id + ": checkpoint"
		if from != "" {
			what = "forking " + id + ": checking " + from
		}
		p.spinner = startProgress(cmd, what)
	}
	return p
}

// update is the zygo.Client.Fork progress callback. Without a terminal it does nothing (the
// client still asks for progress: it costs a few lines).
func (p *forkProgress) update(pr wire.ForkProgress) {
	if !stdoutIsTerminal(p.cmd) {
		return
	}
	if p.bar == nil {
		p.spinner()
		p.bar = progressbar.NewOptions(pr.N,
			progressbar.OptionSetWriter(p.cmd.ErrOrStderr()),
			progressbar.OptionSetDescription(fmt.Sprintf("forking %s from %s", p.id, pr.Checkpoint)),
			progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionClearOnFinish(),
		)
	}
	if pr.Failed > 0 {
		p.bar.Describe(fmt.Sprintf("forking %s from %s (%d failed)", p.id, pr.Checkpoint, pr.Failed))
	}
	_ = p.bar.Set(pr.Ready + pr.Failed)
}

// stop clears whatever is shown.
func (p *forkProgress) stop() {
	p.spinner()
	if p.bar != nil {
		_ = p.bar.Finish()
		_ = p.bar.Clear()
	}
}
