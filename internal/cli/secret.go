package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/zygo-run/zygo/internal/secret"
)

func newSecretCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "secret", Short: "Manage secrets (values are encrypted at rest and never printed)"}
	var tenant string
	set := &cobra.Command{
		Use:   "set NAME [--tenant T]",
		Short: "Set a secret; the value is read from stdin (never from the command line)",
		Long: "Set a secret; the value is read from stdin (never from the command line).\n" +
			"With --tenant T it is the pool tenant T's secret NAME (stored as tenant_T__NAME, with\n" +
			"T's - as _), which a pool run of that tenant receives with --secret NAME; no function\n" +
			"or sandbox can name a tenant_ secret.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tenant != "" {
				if err := secret.ValidTenant("--tenant", tenant); err != nil {
					return err
				}
				if err := secret.ValidName(args[0]); err != nil {
					return err
				}
			} else if err := secret.ValidSharedName(args[0]); err != nil {
				return err
			}
			v, err := readSecretValue(cmd)
			if err != nil {
				return err
			}
			if tenant != "" {
				if err := g.client().SetTenantSecret(cmd.Context(), tenant, args[0], v); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "secret %s of tenant %s set\n", args[0], tenant)
				return nil
			}
			if err := g.client().SetSecret(cmd.Context(), args[0], v); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "secret %s set\n", args[0])
			return nil
		},
	}
	set.Flags().StringVar(&tenant, "tenant", "", "a pool tenant whose secret this is")
	cmd.AddCommand(set)
	cmd.AddCommand(newSecretLsCmd(g))
	var rmTenant string
	rm := &cobra.Command{
		Use:   "rm NAME [--tenant T]",
		Short: "Delete a secret (with --tenant, that pool tenant's)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if rmTenant != "" {
				err = g.client().RemoveTenantSecret(cmd.Context(), rmTenant, args[0])
			} else {
				err = g.client().RemoveSecret(cmd.Context(), args[0])
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "secret %s removed\n", args[0])
			return nil
		},
	}
	rm.Flags().StringVar(&rmTenant, "tenant", "", "the pool tenant whose secret it is")
	cmd.AddCommand(rm)
	return cmd
}

func newSecretLsCmd(g *globals) *cobra.Command {
	var out *Output
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List secret names and when they were last set",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ms, err := g.client().ListSecrets(cmd.Context())
			if err != nil {
				return err
			}
			return out.print(cmd, ms, func(tw io.Writer) {
				fmt.Fprintln(tw, "NAME\tUPDATED")
				for _, m := range ms {
					fmt.Fprintf(tw, "%s\t%s\n", m.Name, m.UpdatedAt.UTC().Format(timeFormat))
				}
			}, func() []string {
				names := make([]string, len(ms))
				for i, m := range ms {
					names[i] = m.Name
				}
				return names
			})
		},
	}
	out = addOutput(cmd, listCmd)
	return cmd
}

// readSecretValue reads the value from stdin: without echo when stdin is a
// terminal, else all of it, with one trailing newline removed.
func readSecretValue(cmd *cobra.Command) ([]byte, error) {
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(cmd.ErrOrStderr(), "value (not echoed): ")
		v, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(cmd.ErrOrStderr())
		if err != nil {
			return nil, err
		}
		return v, nil
	}
	v, err := io.ReadAll(io.LimitReader(in, secret.MaxValueBytes+1))
	if err != nil {
		return nil, err
	}
	v = bytes.TrimSuffix(bytes.TrimSuffix(v, []byte("\n")), []byte("\r"))
	if len(v) == 0 {
		return nil, errors.New("empty value on stdin (pipe it in: printf %s \"$VALUE\" | zygo secret set NAME)")
	}
	return v, nil
}
