package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// newTokenCmd is `zygo token`: the named bearer tokens of the daemon's TCP listener.
func newTokenCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Manage the API tokens that calls over TCP (--listen) must carry",
		Long: "API tokens let other users and machines call the daemon over its --listen address. Each has\n" +
			"a name, shown in the daemon's access log with every call it makes. The daemon keeps only a\n" +
			"SHA-256 digest of each; create prints the secret once. Tokens are created and revoked on the\n" +
			"daemon's unix socket only (run these on its host, as its user); ls works over TCP too.\n" +
			"The token in STATE/api.token is the one named default.",
	}
	cmd.AddCommand(newTokenCreateCmd(g), newTokenLsCmd(g), newTokenRevokeCmd(g))
	return cmd
}

func newTokenCreateCmd(g *globals) *cobra.Command {
	var name string
	var out *Output
	cmd := &cobra.Command{
		Use:   "create --name NAME",
		Short: "Create a token and print its secret (shown this once only)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return usagef("--name is required: the name the access log shows for the token's calls")
			}
			tok, err := g.client().CreateToken(cmd.Context(), name)
			if err != nil {
				return nameFlags(err, []fieldFlag{{"name", "--name"}})
			}
			if !out.JSON() {
				fmt.Fprintf(cmd.ErrOrStderr(), "token %s created; its secret follows and is not shown again "+
					"(callers send it as Authorization: Bearer SECRET, or set ZYGO_TOKEN):\n", tok.Name)
			}
			return out.print(cmd, tok, func(w io.Writer) { fmt.Fprintln(w, tok.Secret) }, nil)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the token's name: 1-63 lowercase letters, digits, '.', '_' or '-'")
	out = addOutput(cmd, singleCmd)
	return cmd
}

func newTokenLsCmd(g *globals) *cobra.Command {
	var out *Output
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List tokens: name, when created, when last used (never a secret)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			toks, err := g.client().Tokens(cmd.Context())
			if err != nil {
				return err
			}
			return out.print(cmd, toks, func(w io.Writer) {
				fmt.Fprintln(w, "NAME\tCREATED\tLAST USED")
				for _, t := range toks {
					used := "never"
					if t.LastUsedAt != nil {
						used = t.LastUsedAt.Format(timeFormat)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\n", t.Name, t.CreatedAt.Format(timeFormat), used)
				}
			}, func() []string { return tokenNames(toks) })
		},
	}
	out = addOutput(cmd, listCmd)
	return cmd
}

// timeFormat is how tables show a time (UTC).
const timeFormat = "2006-01-02 15:04:05Z"

func tokenNames(toks []wire.Token) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = t.Name
	}
	return out
}

func newTokenRevokeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke a token: calls carrying it are refused (401) from now on",
		Long: "Revoke a token: calls carrying it are refused (401) from now on. Revoking default also\n" +
			"removes STATE/api.token; the daemon makes a new one when it next starts with --listen.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.client().RevokeToken(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "token %s revoked\n", args[0])
			return nil
		},
	}
}
