package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestFlagUsageHasNoBackticks: pflag takes a `word` in a flag's usage as the name of its
// value, so `--rand-guard make build   native-randomness...` is what help would show.
// No flag of any command may have one.
func TestFlagUsageHasNoBackticks(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if strings.Contains(f.Usage, "`") {
					t.Errorf("%s --%s: usage has a backtick: %q", c.CommandPath(), f.Name, f.Usage)
				}
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(&globals{}))
	if code, out, _ := runCLI(t, "serve", "--help"); code != 0 || !strings.Contains(out, "--rand-guard string") {
		t.Errorf("serve --help (exit %d) does not show --rand-guard string:\n%s", code, out)
	}
}
