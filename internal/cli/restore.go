//go:build linux

package cli

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/internal/backup"
)

func newRestoreCmd(g *globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "restore DIR",
		Short: "Restore a backup made by zygo backup into the state dir (no daemon may run on it)",
		Long: "Checks every file of the backup in DIR against its manifest (a link, a FIFO or a device in DIR is refused), then writes it into the state dir (--state-dir), " +
			"which must be new or empty unless --force (then its store, key, token, versions and images are replaced). " +
			"Start zygo serve on it afterwards: it serves the restored functions; sandboxes of the backed-up daemon come back as dead records.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			state := g.resolveStateDir()
			m, err := backup.Restore(args[0], state, force)
			if err != nil {
				return fmt.Errorf("restoring: %w", err)
			}
			if abs, _ := filepath.Abs(state); m.Includes.Checkpoints && abs != m.StateDir {
				fmt.Fprintf(cmd.ErrOrStderr(), "zygo: warning: the checkpoint images were backed up from %s and their records name paths there: "+
					"restored into %s, they are not found, and the daemon removes them at start; restore into %s to keep them\n", m.StateDir, abs, m.StateDir)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored the backup of %s (made %s) into %s: %d versions, %d files; start zygo serve --state-dir %s\n",
				m.StateDir, m.CreatedAt.Format("2006-01-02 15:04:05Z"), state, m.Includes.Versions, len(m.Files), state)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "restore into a state dir that is not empty, replacing its store, secret key, token, versions and images")
	return cmd
}
