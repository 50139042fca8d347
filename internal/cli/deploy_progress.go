package cli

import (
	"fmt"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// deployProgress shows the steps of a deploy or rollback as the daemon streams them: a
// spinner naming the step on a terminal, else one line per step on stderr ("hello:
// importing sha256:1a2b..."), so a log of a scripted `zygo up` shows where a slow deploy was.
type deployProgress struct {
	cmd  *cobra.Command
	name string
	tty  bool
	bar  *progressbar.ProgressBar // on a terminal, from the first step
}

func newDeployProgress(cmd *cobra.Command, name string) *deployProgress {
	return &deployProgress{cmd: cmd, name: name, tty: stdoutIsTerminal(cmd)}
}

// update is the zygo.Client.DeployStream progress callback.
func (p *deployProgress) update(ev wire.DeployEvent) {
	what := p.name + ": " + stepText(ev.Step)
	if ev.Version != "" {
		what += " " + short(ev.Version)
	}
	if !p.tty {
		fmt.Fprintln(p.cmd.ErrOrStderr(), what)
		return
	}
	if p.bar == nil {
		p.bar = progressbar.NewOptions(-1,
			progressbar.OptionSetWriter(p.cmd.ErrOrStderr()),
			progressbar.OptionSpinnerType(14),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetSpinnerChangeInterval(100*time.Millisecond),
			progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionClearOnFinish(),
		)
	}
	p.bar.Describe(what)
}

// stop clears the spinner.
func (p *deployProgress) stop() {
	if p.bar != nil {
		_ = p.bar.Finish()
		_ = p.bar.Clear()
	}
}

// stepText is how a step reads while it is under way.
func stepText(step string) string {
	switch step {
	case wire.StepUploading:
		return "uploading"
	case wire.StepUnpacking:
		return "unpacking"
	case wire.StepImporting:
		return "importing"
	case wire.StepWarmup:
		return "imported; warm-up checks done, moving traffic to"
	case wire.StepReady:
		return "ready:"
	}
	return step
}
