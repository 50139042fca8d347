//go:build linux

package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/internal/backup"
	"github.com/zygo-run/zygo/internal/daemon"
)

func newBackupCmd(g *globals) *cobra.Command {
	var checkpoints bool
	var out *Output
	cmd := &cobra.Command{
		Use:   "backup DIR",
		Short: "Back up the daemon's state (store, secret key, versions; checkpoints with --checkpoints) into DIR, online",
		Long: "Copies the state dir (--state-dir) into DIR (new, or empty and owned by root or you on a path no other user can change; made 0700: it holds the secret key) while the daemon serves: " +
			"the store by SQLite's VACUUM INTO, the key secrets are sealed with, the API token, every stored version's code and, " +
			"with --checkpoints, the checkpoint images (they can be large). DIR/" + backup.ManifestFile + " lists every file with its SHA-256. " +
			"Running sandboxes are never backed up. zygo restore DIR writes it back.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := backup.Create(cmd.Context(), g.resolveStateDir(), args[0], backup.Options{Checkpoints: checkpoints, ZygoVersion: daemon.Version})
			if err != nil {
				return fmt.Errorf("backing up: %w", err)
			}
			if out.JSON() {
				return printJSON(cmd, m)
			}
			var bytes int64
			for _, f := range m.Files {
				bytes += f.Size
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backed up %s into %s: store, %d versions%s%s, %d files, %d bytes\n", m.StateDir, args[0],
				m.Includes.Versions, map[bool]string{true: ", secret key"}[m.Includes.SecretKey],
				map[bool]string{true: ", checkpoint images"}[m.Includes.Checkpoints], len(m.Files), bytes)
			return nil
		},
	}
	out = addOutput(cmd, singleCmd)
	cmd.Flags().BoolVar(&checkpoints, "checkpoints", false, "also copy the checkpoint images (without them, checkpoint records come back but cannot be forked or rolled back to)")
	return cmd
}
