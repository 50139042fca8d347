package cli

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"text/tabwriter"

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
		Short: "Copy the local file SRC (- for stdin) to the absolute path DEST in the sandbox",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			perm, err := strconv.ParseUint(mode, 8, 32)
			if err != nil || perm > 0o7777 {
				return fmt.Errorf("--mode %q: want octal permission bits such as 644", mode)
			}
			var r io.Reader = cmd.InOrStdin()
			if args[1] != "-" {
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
		Short: "Copy the file at PATH in the sandbox to DEST (default stdout)",
		Args:  cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 || args[2] == "-" {
				return g.client().GetFile(cmd.Context(), args[0], args[1], cmd.OutOrStdout())
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
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			for _, fi := range ls.Entries {
				name := fi.Name
				if fi.IsDir {
					name += "/"
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", fs.FileMode(fi.Mode), fi.Size, fi.ModTime.UTC().Format("2006-01-02 15:04:05Z"), name)
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(put, get, ls)
	return cmd
}
