// Package cli holds Zygo's command-line interface (cobra), one file per
// command. Client commands talk to the daemon over its unix socket, found
// through --state-dir or $ZYGO_STATE_DIR, or over TCP (TLS for a remote
// daemon) with --addr, $ZYGO_ADDR or the context file (context.go), sending a
// bearer token from $ZYGO_TOKEN, the context file or STATE/api.token. The
// daemon's own commands (serve, check) exist on Linux only (daemon_linux.go);
// the client commands build for any system and depend on the SDK (sdk/go) only
// among Zygo's packages, besides errdefs and secret's name rules.
//
// Conventions every command follows: -o table|json and, on lists, -q
// (output.go); exit status 2 with the usage for a usage error, 1 for a
// runtime error (usage.go).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// Execute runs the CLI on os.Args and returns the process exit status.
func Execute() int {
	beforeSignals(os.Args[1:]) // `serve` may re-execute itself here (sysmon_linux.go)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, os.Args[1:], os.Stdout, os.Stderr)
}

// run runs the CLI on args (without the program name), printing to stdout
// and stderr, and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{}
	root := newRootCmd(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	if strings.HasPrefix(err.Error(), "required flag(s) ") {
		// cobra checks required flags after markUsageErrors' hooks, with no hook of its own.
		err = &usageError{err}
	}
	err = g.explain(err)
	// errdefs.Message: the CLI's own errors (a manifest, a secret name) read as the
	// daemon's do, the category once and only as a predicate.
	if msg := errdefs.Message(err); msg != "" { // an exitError may carry only a status
		fmt.Fprintln(stderr, "zygo: "+msg)
	}
	if isUsage(err) {
		fmt.Fprint(stderr, "\n"+cmd.UsageString())
		return exitUsage
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitRuntime
}

// newRootCmd returns the command tree, its flags bound to g.
func newRootCmd(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "zygo",
		Short:         "Zygo copies running code fast and makes every copy independent",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	g.addFlags(root)
	// The target is resolved once before any command runs, so that a broken context file or
	// CA is reported before the command does anything; commands marked local skip it.
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if cmd.Annotations[annotationLocal] != "" {
			return nil
		}
		if err := g.resolve(); err != nil {
			return err
		}
		if g.tgt.addr == "" && strings.TrimSpace(os.Getenv("ZYGO_TOKEN")) != "" {
			fmt.Fprintln(cmd.ErrOrStderr(), "zygo: warning: $ZYGO_TOKEN is not used over the local socket "+
				"(no --addr, $ZYGO_ADDR or context address): the socket needs no token and has the daemon's full rights")
		}
		return nil
	}
	root.AddCommand(daemonCommands(g)...) // serve, check: Linux only
	root.AddCommand(newUpCmd(g), newInvokeCmd(g), newLsCmd(g), newLogsCmd(g), newRmCmd(g), newStatusCmd(g), newSecretCmd(g), newSandboxCmd(g))
	root.AddCommand(newTokenCmd(g))
	root.AddCommand(newVersionCmd(g))
	root.AddCommand(newCompletionCmd())
	root.AddCommand(newVersionsCmd(g), newRollbackCmd(g))
	root.AddCommand(newPoolCmd(g))
	markUsageErrors(root) // last: it marks the commands added above
	return root
}

// exitError carries a specific exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

// annotationLocal marks a command that does not talk to a daemon through the client flags
// (completion, serve, check): the context file is not read for it.
const annotationLocal = "zygo.local"

// local marks cmd with annotationLocal and returns it.
func local(cmd *cobra.Command) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[annotationLocal] = "1"
	return cmd
}
