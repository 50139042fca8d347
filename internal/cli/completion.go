package cli

import (
	"github.com/spf13/cobra"
)

// newCompletionCmd is `zygo completion bash|zsh|fish|powershell`: cobra's completion scripts.
func newCompletionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "Print a shell completion script",
		Long: "Print the completion script of a shell. Load it in the current shell with\n" +
			"  source <(zygo completion bash)     (bash; needs the bash-completion package)\n" +
			"  source <(zygo completion zsh)      (zsh)\n" +
			"  zygo completion fish | source      (fish)\n" +
			"or write it where the shell loads completions, e.g.\n" +
			"  zygo completion bash > /etc/bash_completion.d/zygo",
		ValidArgs: []string{"bash", "zsh", "fish", "powershell"},
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			root, w := cmd.Root(), cmd.OutOrStdout()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(w, true)
			case "zsh":
				return root.GenZshCompletion(w)
			case "fish":
				return root.GenFishCompletion(w, true)
			default:
				return root.GenPowerShellCompletionWithDesc(w)
			}
		},
	}
	return local(cmd)
}
