package cli

import "github.com/spf13/cobra"

// daemonCommands are the commands that run a daemon in this process: `zygo serve` and
// `zygo check` (which starts a private one), and backup/restore of a local state dir. They need Linux (bubblewrap, gVisor, cgroups);
// on other systems the CLI is a client only (daemon_other.go).
func daemonCommands(g *globals) []*cobra.Command {
	return []*cobra.Command{local(newServeCmd(g)), newCheckCmd(g), local(newBackupCmd(g)), local(newRestoreCmd(g))}
}
