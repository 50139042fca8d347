package cli

import (
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
)

// startProgress shows a spinner with the elapsed time on stderr while a long call (checkpoint,
// fork, rollback) runs, only when stdout is a terminal; the returned func clears it. The API
// answers these calls once, at the end, so there is no count to show.
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
