package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

func newSandboxExecCmd(g *globals) *cobra.Command {
	var body wire.ExecBody
	var stdin bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "exec ID [--env KEY=VALUE]... [--cwd DIR] [--timeout D] [-i] -- CMD [ARGS...]",
		Short: "Run a command in a sandbox, streaming its output; exits with the command's code",
		Long: "Run a command in a sandbox. Its stdout and stderr are streamed as they come and zygo exits\n" +
			"with the command's exit code (128+N when a signal N killed it). A command that cannot start\n" +
			"(a missing binary) is an error, exit status 1. -i streams this process's stdin to the command:\n" +
			"the command starts at once, gets each chunk as it is read, and sees EOF when stdin ends\n" +
			"(`zygo sandbox exec -i ID -- cat` echoes line by line). Without -i, stdin is not read and\n" +
			"the command's stdin is /dev/null.\n" +
			"Flags for zygo go before the --; everything after it is the command.",
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, argv := args[0], args[1:]
			if dash := cmd.ArgsLenAtDash(); dash > 1 {
				return fmt.Errorf("exec takes one sandbox id before --, got %q", args[:dash])
			}
			body.Argv = argv
			body.TimeoutMs = timeout.Milliseconds()
			var st wire.ExitStatus
			var err error
			if stdin {
				st, err = g.client().ExecStream(cmd.Context(), id, body, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
			} else {
				st, err = g.client().Exec(cmd.Context(), id, body, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			if err != nil {
				return err
			}
			switch {
			case st.TimedOut:
				return &exitError{code: st.Code, err: fmt.Errorf("%s timed out after %s and was killed", argv[0], timeout)}
			case st.Code != 0:
				return &exitError{code: st.Code, err: errors.New("")} // the command spoke for itself
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&body.Env, "env", nil, "KEY=VALUE added to the command's environment (repeatable)")
	cmd.Flags().StringVar(&body.Cwd, "cwd", "", "working directory inside the sandbox (default /)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "after this long SIGTERM the command (its process group), SIGKILL 2s later (default: no limit)")
	cmd.Flags().BoolVarP(&stdin, "stdin", "i", false, "stream stdin to the command (EOF closes its stdin)")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return fmt.Errorf("%w (a flag of the command goes after --: zygo sandbox exec ID -- CMD [ARGS...])", err)
	})
	return cmd
}

func newSandboxRunCodeCmd(g *globals) *cobra.Command {
	var code string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "run-code ID [--code SRC | < file.py]",
		Short: "Run Python in the sandbox's persistent interpreter",
		Long: "Run Python source in the sandbox's persistent interpreter: variables survive between calls\n" +
			"and are carried into forks. What the code prints is streamed; if the last statement is an\n" +
			"expression its repr is printed after it, as in a notebook. An exception prints its traceback\n" +
			"on stderr and exits 1 (the interpreter and its variables survive it). Output beyond 16 MiB per\n" +
			"call is discarded (a marker on stderr shows where; the code keeps running).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src := code
			if !cmd.Flags().Changed("code") {
				b, err := io.ReadAll(cmd.InOrStdin())
				if err != nil {
					return fmt.Errorf("reading code from stdin: %w", err)
				}
				src = string(b)
			}
			if strings.TrimSpace(src) == "" {
				return errors.New("no code: pass --code SRC or pipe it on stdin")
			}
			res, err := g.client().RunCode(cmd.Context(), args[0], wire.CodeBody{Code: src, TimeoutMs: timeout.Milliseconds()},
				cmd.OutOrStdout(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if !res.OK {
				fmt.Fprint(cmd.ErrOrStderr(), strings.TrimRight(res.Error, "\n")+"\n")
				return &exitError{code: 1, err: errors.New("")}
			}
			if res.Value != "" {
				fmt.Fprintln(cmd.OutOrStdout(), res.Value)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&code, "code", "c", "", "the Python source (default: read stdin)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "interrupt the code after this long (KeyboardInterrupt; state survives); code still running 2s later is killed and the interpreter restarted (state lost)")
	return cmd
}
