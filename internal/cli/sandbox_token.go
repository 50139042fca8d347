package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// newSandboxTokenCmd is `zygo sandbox token ID`: the sandbox's access token.
func newSandboxTokenCmd(g *globals) *cobra.Command {
	var out *Output
	cmd := &cobra.Command{
		Use:   "token ID",
		Short: "Print the sandbox's access token: a bearer token for this sandbox alone",
		Long: "Print the access token of the sandbox (zygo_sbx_ID_ and 64 hex digits). It reaches only that\n" +
			"sandbox's record, exec, run-code, files, generation, services and ports; the daemon refuses it\n" +
			"(403) on every other sandbox and route: create, rm, fork, checkpoint, rollback, pause, resume,\n" +
			"functions, secrets, pools, tokens. Hand it to whoever uses the sandbox instead of a daemon\n" +
			"token: ZYGO_TOKEN=TOKEN zygo --addr ADDR sandbox exec ID -- CMD. The same sandbox always has\n" +
			"the same token; it dies with the sandbox (rm), and a fork or restore has a token of its own.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			at, err := g.client().SandboxAccessToken(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return out.print(cmd, at, func(w io.Writer) { fmt.Fprintln(w, at.Token) }, nil)
		},
	}
	out = addOutput(cmd, singleCmd)
	return cmd
}
