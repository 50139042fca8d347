package cli

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"

	"github.com/spf13/cobra"
)

func newSandboxFilesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "files",
		Short: "Copy files into and out of a sandbox, and list its directories",
	}
	var mode string
	put := &cobra.Command{
		Use:   "put ID SRC DEST",
		Short: "Copy the local file or directory SRC (- for stdin) to the absolute path DEST in the sandbox",
		Long: "Copy the local file or directory SRC (- for stdin) to the absolute path DEST in the sandbox.\n" +
			"A directory is copied file by file (regular files with their modes; links are skipped); when DEST\n" +
			"is an existing directory, SRC goes inside it under its own name.",
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			perm, err := strconv.ParseUint(mode, 8, 32)
			if err != nil || perm > 0o7777 {
				return fmt.Errorf("--mode %q: want octal permission bits such as 644", mode)
			}
			var r io.Reader = cmd.InOrStdin()
			if args[1] != "-" {
				if st, err := os.Stat(args[1]); err == nil && st.IsDir() {
					return putDir(cmd.Context(), g.client(), args[0], args[1], args[2], cmd.ErrOrStderr())
				}
				f, err := os.Open(args[1])
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
				if !cmd.Flags().Changed("mode") {
					if st, err := f.Stat(); err == nil {
						perm = uint64(st.Mode().Perm())
					}
				}
			}
			return g.client().PutFile(cmd.Context(), args[0], args[2], uint32(perm), r)
		},
	}
	put.Flags().StringVar(&mode, "mode", "644", "permission bits in octal (default: the local file's, or 644 for stdin)")
	get := &cobra.Command{
		Use:   "get ID PATH [DEST]",
		Short: "Copy the file or directory at PATH in the sandbox to DEST (default stdout, for a file)",
		Long: "Copy the file or directory at PATH in the sandbox to the local DEST (default stdout, for a file).\n" +
			"A directory is copied file by file (regular files with their modes; links are skipped); when DEST\n" +
			"is an existing directory, PATH goes inside it under its own name.",
		Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			if isSandboxDir(cmd.Context(), c, args[0], args[1]) {
				if len(args) == 2 || args[2] == "-" {
					return fmt.Errorf("%s %w", args[1], errStdoutDir)
				}
				return getDir(cmd.Context(), c, args[0], args[1], args[2], cmd.ErrOrStderr())
			}
			if len(args) == 2 || args[2] == "-" {
				return c.GetFile(cmd.Context(), args[0], args[1], cmd.OutOrStdout())
			}
			tmp := args[2] + ".zygo-partial"
			f, err := os.Create(tmp)
			if err != nil {
				return err
			}
			defer os.Remove(tmp)
			if err := g.client().GetFile(cmd.Context(), args[0], args[1], f); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			return os.Rename(tmp, args[2])
		},
	}
	var lsOut *Output
	ls := &cobra.Command{
		Use:   "ls ID [PATH]",
		Short: "List the directory at PATH in the sandbox (default /)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := "/"
			if len(args) == 2 {
				p = args[1]
			}
			ls, err := g.client().ListFiles(cmd.Context(), args[0], p)
			if err != nil {
				return err
			}
			if ls.Total > len(ls.Entries) {
				defer fmt.Fprintf(cmd.ErrOrStderr(), "%s has %d entries; the first %d in name order are shown\n", p, ls.Total, len(ls.Entries))
			}
			return lsOut.print(cmd, ls.Entries, func(tw io.Writer) {
				for _, fi := range ls.Entries {
					name := fi.Name
					if fi.IsDir {
						name += "/"
					}
					fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", fs.FileMode(fi.Mode), fi.Size, fi.ModTime.UTC().Format(timeFormat), name)
				}
			}, func() []string {
				names := make([]string, len(ls.Entries))
				for i, fi := range ls.Entries {
					names[i] = fi.Name
				}
				return names
			})
		},
	}
	lsOut = addOutput(ls, listCmd)
	cmd.AddCommand(put, get, ls)
	return cmd
}
