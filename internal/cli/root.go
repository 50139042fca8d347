// Package cli holds Zygo's command-line interface (cobra), one file per
// command. Client commands talk to the daemon over its unix socket, found
// through --state-dir or $ZYGO_STATE_DIR, or over TCP with --addr, sending
// the daemon's bearer token from $ZYGO_TOKEN or STATE/api.token.
package cli

import (
	"context"
	"errors"
	"fmt"
	"github.com/zygo-run/zygo/internal/errdefs"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/internal/daemon"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

type globals struct {
	stateDir string
	addr     string
	// tokenFrom is where client found the token for --addr: "$ZYGO_TOKEN",
	// the token file's path, or "" when it found none.
	tokenFrom string
}

// Execute runs the CLI on os.Args and returns the process exit status.
func Execute() int {
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
	if err := root.ExecuteContext(ctx); err != nil {
		if zygo.IsUnauthenticated(err) {
			err = g.explainUnauthenticated(err)
		}
		// errdefs.Message: the CLI's own errors (a manifest, a secret name) read as the
		// daemon's do, the category once and only as a predicate.
		if msg := errdefs.Message(err); msg != "" { // an exitError may carry only a status
			fmt.Fprintln(stderr, "zygo: "+msg)
		}
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return 1
	}
	return 0
}

// newRootCmd returns the command tree, its flags bound to g.
func newRootCmd(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "zygo",
		Short:         "Zygo copies running code fast and makes every copy independent",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.stateDir, "state-dir", "", "daemon state directory (default $ZYGO_STATE_DIR, else "+daemon.DefaultStateDir()+")")
	root.PersistentFlags().StringVar(&g.addr, "addr", "", "talk to the daemon over loopback TCP (host:port) instead of its unix socket; "+
		"the token comes from $ZYGO_TOKEN, else from api.token in the state dir")
	root.AddCommand(newServeCmd(g), newUpCmd(g), newInvokeCmd(g), newLsCmd(g), newLogsCmd(g), newRmCmd(g), newStatusCmd(g), newSecretCmd(g), newCheckCmd(g), newSandboxCmd(g))
	root.AddCommand(newPoolCmd(g))
	return root
}

// exitError carries a specific exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func (g *globals) resolveStateDir() string {
	if g.stateDir != "" {
		return g.stateDir
	}
	if s := os.Getenv("ZYGO_STATE_DIR"); s != "" {
		return s
	}
	return daemon.DefaultStateDir()
}

func (g *globals) client() *zygo.Client {
	if g.addr != "" {
		return zygo.NewTCPClient(g.addr, g.token())
	}
	return zygo.NewClient(daemon.SocketPath(g.resolveStateDir()))
}

// token returns the bearer token for --addr: $ZYGO_TOKEN, else the contents
// of the token file under the resolved state dir when this user can read it,
// else "". It records where it found it in g.tokenFrom.
func (g *globals) token() string {
	g.tokenFrom = ""
	if tok := strings.TrimSpace(os.Getenv("ZYGO_TOKEN")); tok != "" {
		g.tokenFrom = "$ZYGO_TOKEN"
		return tok
	}
	path := daemon.TokenPath(g.resolveStateDir())
	if b, err := os.ReadFile(path); err == nil {
		if tok := strings.TrimSpace(string(b)); tok != "" {
			g.tokenFrom = path
			return tok
		}
	}
	return ""
}

// explainUnauthenticated adds to a 401 from --addr what the user can do.
func (g *globals) explainUnauthenticated(err error) error {
	switch g.tokenFrom {
	case "":
		return fmt.Errorf("%w\nzygo found no token to send (no $ZYGO_TOKEN, no readable %s): set ZYGO_TOKEN to the contents "+
			"of api.token in the daemon's state dir, or run zygo as the daemon's user with the same --state-dir",
			err, daemon.TokenPath(g.resolveStateDir()))
	case "$ZYGO_TOKEN":
		return fmt.Errorf("%w\nthe daemon at %s refused the token in $ZYGO_TOKEN: set it to the contents of api.token "+
			"in that daemon's state dir", err, g.addr)
	default:
		return fmt.Errorf("%w\nthe daemon at %s refused the token in %s: it serves another state dir; pass its --state-dir, "+
			"or set ZYGO_TOKEN to the contents of its api.token", err, g.addr, g.tokenFrom)
	}
}
