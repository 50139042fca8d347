// Package cli holds Zygo's command-line interface (cobra), one file per
// command. Client commands talk to the daemon over its unix socket, found
// through --state-dir or $ZYGO_STATE_DIR, or over TCP with --addr.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/internal/api"
	"github.com/zygo-run/zygo/internal/daemon"
)

type globals struct {
	stateDir string
	addr     string
}

// Execute runs the CLI and returns the process exit status.
func Execute() int {
	g := &globals{}
	root := &cobra.Command{
		Use:           "zygo",
		Short:         "Zygo copies running code fast and makes every copy independent",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.stateDir, "state-dir", "", "daemon state directory (default $ZYGO_STATE_DIR, else "+daemon.DefaultStateDir()+")")
	root.PersistentFlags().StringVar(&g.addr, "addr", "", "talk to the daemon over loopback TCP (host:port) instead of its unix socket")
	root.AddCommand(newServeCmd(g), newUpCmd(g), newInvokeCmd(g), newLsCmd(g), newLogsCmd(g), newRmCmd(g), newStatusCmd(g), newSecretCmd(g), newCheckCmd(g), newSandboxCmd(g))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		if msg := err.Error(); msg != "" { // an exitError may carry only a status
			fmt.Fprintln(os.Stderr, "zygo: "+msg)
		}
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return 1
	}
	return 0
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

func (g *globals) client() *api.Client {
	if g.addr != "" {
		return api.NewTCPClient(g.addr)
	}
	return api.NewUnixClient(daemon.SocketPath(g.resolveStateDir()))
}
