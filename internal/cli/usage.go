package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// Exit statuses of the CLI: 0 success, 1 a runtime error (the daemon refused or failed, a
// file could not be read), 2 a usage error (an unknown command or flag, a wrong number of
// arguments, a flag's value that does not parse), after which the command's usage is printed.
// A few commands pass on another status (sandbox exec: the program's; 127 when it is missing).
const (
	exitRuntime = 1
	exitUsage   = 2
)

// usageError is a mistake in how the command was called: exit status 2, usage printed.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef returns a usageError with the message formatted by fmt.Errorf.
func usagef(format string, args ...any) error { return &usageError{fmt.Errorf(format, args...)} }

// isUsage reports whether err is a usage error.
func isUsage(err error) bool {
	var ue *usageError
	return errors.As(err, &ue)
}

// markUsageErrors makes every usage mistake cobra detects in cmd and the commands under it a
// usageError: flag parsing (SetFlagErrorFunc), argument counts (each command's Args), and an
// unknown subcommand of a command that only groups others (which cobra would answer with its
// help and status 0).
func markUsageErrors(cmd *cobra.Command) {
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	for _, c := range append([]*cobra.Command{cmd}, allSubcommands(cmd)...) {
		switch {
		case c.Args != nil:
			args := c.Args
			c.Args = func(c *cobra.Command, a []string) error {
				if err := args(c, a); err != nil {
					return &usageError{err}
				}
				for i, v := range a {
					if strings.TrimSpace(v) == "" { // a name, an id, a path: never empty
						return usagef("argument %d of %s is empty", i+1, c.CommandPath())
					}
				}
				return nil
			}
		case !c.Runnable() && c.HasSubCommands():
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(c *cobra.Command, a []string) error {
				if len(a) > 0 {
					return usagef("unknown command %q for %q", a[0], c.CommandPath())
				}
				return c.Help()
			}
		}
	}
}

// allSubcommands returns every command under cmd, depth first.
func allSubcommands(cmd *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, c := range cmd.Commands() {
		out = append(out, c)
		out = append(out, allSubcommands(c)...)
	}
	return out
}
