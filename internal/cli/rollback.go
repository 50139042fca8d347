package cli

import (
	"errors"
	"strings"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/sdk/go/zygo"
)

func newRollbackCmd(g *globals) *cobra.Command {
	var to string
	var out *Output
	cmd := &cobra.Command{
		Use:   "rollback NAME [--to HASH]",
		Short: "Make an earlier version of a function active again",
		Long: "Make an earlier stored version of a function active again, the same way as a deploy: its\n" +
			"sandbox is started and warmed up before traffic moves, and the current version drains. If\n" +
			"the import fails the current version keeps serving. Without --to: the version that was\n" +
			"active before the current one. `zygo versions NAME` lists them.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			p := newDeployProgress(cmd, name)
			res, err := g.client().RollbackFunction(cmd.Context(), name, to, p.update)
			p.stop()
			if err != nil {
				return deployFailed(cmd, g.client(), name, renameField(err, "to", "--to"), "")
			}
			if out.JSON() {
				return printJSON(cmd, res)
			}
			printDeployed(cmd, res, "rolled back to")
			return nil
		},
	}
	out = addOutput(cmd, singleCmd)
	cmd.Flags().StringVar(&to, "to", "", "the version: its hash or a unique prefix of it, with or without sha256: (default: the one active before the current one)")
	return cmd
}

// renameField returns err with a leading request field in its message ("to: ...") renamed
// to the flag that filled it ("--to: ..."), whatever its code (an unknown version is a 404);
// any other error as it is.
func renameField(err error, field, flag string) error {
	var ze *zygo.Error
	if !errors.As(err, &ze) {
		return err
	}
	rest, ok := strings.CutPrefix(ze.Message, field+": ")
	if !ok {
		return err
	}
	out := *ze
	out.Message = flag + ": " + rest
	return &out
}
