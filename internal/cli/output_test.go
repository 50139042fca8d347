package cli

import (
	"testing"

	"github.com/spf13/cobra"
)

// noOutputFlag are the commands that print no result of their own to format, each with why.
// Every other runnable command takes -o (output.go), and every list command -q: a command
// added without them fails TestEveryResultTakesOutput.
var noOutputFlag = map[string]string{
	"zygo serve":                  "the daemon: it logs (--log-format), it prints no result",
	"zygo completion":             "prints a shell script",
	"zygo invoke":                 "prints the handler's own JSON value as it came",
	"zygo pool run":               "prints the script's own JSON value as it came",
	"zygo sandbox exec":           "passes the program's stdout and stderr through",
	"zygo sandbox run-code":       "passes the code's output through",
	"zygo sandbox files get":      "writes the file's bytes (or files) where asked",
	"zygo sandbox files put":      "prints nothing but errors",
	"zygo rm":                     "a confirmation line only",
	"zygo pool rm":                "a confirmation line only",
	"zygo secret rm":              "a confirmation line only",
	"zygo secret set":             "a confirmation line only",
	"zygo token revoke":           "a confirmation line only",
	"zygo sandbox rm":             "a confirmation line only",
	"zygo sandbox checkpoints rm": "a confirmation line only",
	"zygo restore":                "a confirmation line only (the backup's manifest is zygo backup -o json's)",
}

// listCommands are the commands that list many things: they take -q too.
var listCommands = map[string]bool{
	"zygo ls": true, "zygo versions": true, "zygo pool ls": true, "zygo secret ls": true, "zygo token ls": true,
	"zygo sandbox ls": true, "zygo sandbox services": true, "zygo sandbox files ls": true, "zygo sandbox checkpoints": true,
	"zygo sandbox templates": true,
}

func TestEveryResultTakesOutput(t *testing.T) {
	seen := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, s := range c.Commands() {
			walk(s)
		}
		if !c.Runnable() || c.Name() == "help" {
			return
		}
		path := c.CommandPath()
		seen[path] = true
		hasO, hasQ := c.Flags().Lookup("output") != nil, c.Flags().Lookup("quiet") != nil
		if c.HasSubCommands() && !hasO && !listCommands[path] {
			return // a group: run alone it is a usage error (usage.go)
		}
		if _, exempt := noOutputFlag[path]; exempt == hasO {
			t.Errorf("%s: takes -o %v, but noOutputFlag says %q", path, hasO, noOutputFlag[path])
		}
		if hasQ != listCommands[path] {
			t.Errorf("%s: takes -q %v; a list command must and no other may", path, hasQ)
		}
	}
	walk(newRootCmd(&globals{}))
	for path := range noOutputFlag {
		if !seen[path] {
			t.Errorf("noOutputFlag names %q, which is no command", path)
		}
	}
	for path := range listCommands {
		if !seen[path] {
			t.Errorf("listCommands names %q, which is no command", path)
		}
	}
}
