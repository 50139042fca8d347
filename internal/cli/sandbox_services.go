package cli

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

func newSandboxServicesCmd(g *globals) *cobra.Command {
	var out *Output
	cmd := &cobra.Command{
		Use:   "services ID",
		Short: "Show the sandbox's services: running or not, pid, restarts, last exit",
		Long: "Show the live state of the services declared at create (--service), as the sandbox's\n" +
			"agent reports it: whether each runs and its pid inside, its restart policy, how many times\n" +
			"the supervisor restarted it, how its last process ended, when the next restart is due while\n" +
			"it waits in backoff, and the file inside the sandbox that holds its output (1 MiB, rotated\n" +
			"once to LOG.1; read it with `zygo sandbox exec ID -- tail LOG`).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := g.client().Services(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if out.JSON() {
				return printJSON(cmd, st)
			}
			if len(st) == 0 && !out.quiet {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s declares no services (zygo sandbox create --service NAME=CMD)\n", args[0])
				return nil
			}
			return out.print(cmd, st, func(tw io.Writer) {
				fmt.Fprintln(tw, "NAME\tSTATE\tPID\tRESTART\tRESTARTS\tLAST EXIT\tLOG\tNOTE")
				for _, s := range st {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.Name, serviceState(s), pidText(s.PID),
						s.Restart, s.Restarts, lastExitText(s), dash(s.Log), serviceNote(s))
				}
			}, func() []string {
				names := make([]string, len(st))
				for i, s := range st {
					names[i] = s.Name
				}
				return names
			})
		},
	}
	out = addOutput(cmd, listCmd)
	out.addJSONAlias(cmd)
	return cmd
}

func serviceState(s wire.ServiceStatus) string {
	switch {
	case s.Running:
		return "running"
	case !s.NextRestartAt.IsZero():
		return "backoff"
	default:
		return "stopped"
	}
}

func pidText(pid int) string {
	if pid == 0 {
		return "-"
	}
	return strconv.Itoa(pid)
}

func lastExitText(s wire.ServiceStatus) string {
	if s.LastExit == nil {
		return "-"
	}
	what := fmt.Sprintf("code %d", s.LastExit.Code)
	if s.LastExit.Signal != 0 {
		what = fmt.Sprintf("signal %d", s.LastExit.Signal)
	}
	return fmt.Sprintf("%s, %s ago", what, time.Since(s.LastExitAt).Round(time.Second))
}

func serviceNote(s wire.ServiceStatus) string {
	switch {
	case s.LastError != "":
		return "start failed: " + s.LastError
	case !s.NextRestartAt.IsZero():
		return "restart in " + time.Until(s.NextRestartAt).Round(100*time.Millisecond).String()
	}
	return ""
}
