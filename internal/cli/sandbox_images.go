package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
)

// newCheckpointExportCmd is `zygo sandbox checkpoints export`: the image as a tar on stdout,
// its size and SHA-256 on stderr.
func newCheckpointExportCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export CHECKPOINT > FILE",
		Short: "Write a checkpoint's image as a tar, to import on another daemon",
		Long: "Write the image of CHECKPOINT (an id or tag) as a tar to stdout, and its size and\n" +
			"SHA-256 to stderr; `zygo sandbox checkpoints import` reads it on another daemon. An image of a\n" +
			"sandbox that holds secrets is never exported (its memory holds their values).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if stdoutIsTerminal(cmd) {
				return usagef("export writes a tar: redirect stdout to a file (zygo sandbox checkpoints export ID > image.tar)")
			}
			img, err := g.client().ExportCheckpoint(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer img.Body.Close()
			h := sha256.New()
			n, err := io.Copy(io.MultiWriter(cmd.OutOrStdout(), h), img.Body)
			switch {
			case err == nil && n != img.Size:
				err = fmt.Errorf("the daemon sent %d of the image's %d bytes", n, img.Size)
			case err == nil && hex.EncodeToString(h.Sum(nil)) != img.SHA256:
				err = errors.New("the image received does not have the SHA-256 the daemon announced")
			}
			if err != nil {
				return fmt.Errorf("exporting %s: %w", args[0], err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "exported %s: %s, sha256 %s\n", img.Checkpoint, humanize.IBytes(uint64(n)), img.SHA256) //nolint:gosec // n >= 0
			return nil
		},
	}
	return cmd
}

// newCheckpointImportCmd is `zygo sandbox checkpoints import`: a tar of export as a new
// checkpoint; prints its id.
func newCheckpointImportCmd(g *globals) *cobra.Command {
	var sum, tag string
	var out *Output
	cmd := &cobra.Command{
		Use:   "import FILE|- [--sha256 HEX] [--tag TAG]",
		Short: "Read a tar of `checkpoints export` as a new checkpoint of this daemon and print its id",
		Long: "Send FILE (or stdin, -), a tar written by `zygo sandbox checkpoints export`, to the daemon, which\n" +
			"checks it (only the image's files, its bounds, every checksum) and keeps it as a new checkpoint\n" +
			"with an id of its own; `zygo sandbox restore` copies it (each copy resealed). --sha256 is the\n" +
			"digest export printed; without it the file's own is sent. Stdin without --sha256 is first\n" +
			"spooled to a temporary file (removed at once; at most 8192 MiB, the daemon's default bound)\n" +
			"to compute its digest; with --sha256 it is streamed as it comes.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var r io.Reader = cmd.InOrStdin()
			size := int64(-1)
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				st, err := f.Stat()
				if err != nil || !st.Mode().IsRegular() {
					return usagef("import %s: not a regular file", args[0])
				}
				if sum == "" {
					h := sha256.New()
					if _, err := io.Copy(h, f); err != nil {
						return fmt.Errorf("reading %s: %w", args[0], err)
					}
					sum = hex.EncodeToString(h.Sum(nil))
					if _, err := f.Seek(0, io.SeekStart); err != nil {
						return err
					}
				}
				r, size = f, st.Size()
			} else if sum == "" {
				f, digest, err := spoolStdin(r, maxSpoolBytes)
				if err != nil {
					return err
				}
				defer func() { _ = f.Close(); _ = os.Remove(f.Name()) }() // removed already where an open file can be
				r, sum = f, digest
				if st, err := f.Stat(); err == nil {
					size = st.Size()
				}
			}
			stop := startProgress(cmd, "importing "+args[0])
			cp, err := g.client().ImportCheckpoint(cmd.Context(), r, size, sum, tag)
			stop()
			if err != nil {
				return err
			}
			return out.print(cmd, cp, func(w io.Writer) { fmt.Fprintln(w, cp.ID) }, nil)
		},
	}
	cmd.Flags().StringVar(&sum, "sha256", "", "the image's SHA-256 as export printed it (default: the file's own)")
	cmd.Flags().StringVar(&tag, "tag", "", "the new checkpoint's tag (default: the image's)")
	out = addOutput(cmd, singleCmd)
	return cmd
}

// maxSpoolBytes bounds what import - spools from stdin: the daemon's default bound on an
// imported image (--checkpoint-import-max-mib 8192); a larger one needs --sha256 (streamed).
const maxSpoolBytes = 8192 << 20

// spoolStdin copies r into an unlinked temporary file (in $TMPDIR), at most max bytes, and
// returns it rewound with the hex SHA-256 of what it holds. Over max is a usage error saying
// to give --sha256. The caller closes the file and removes its name (gone already but on
// Windows); its space is freed then.
func spoolStdin(r io.Reader, max int64) (*os.File, string, error) {
	f, err := os.CreateTemp("", "zygo-import-*.tar")
	if err != nil {
		return nil, "", fmt.Errorf("spooling stdin to compute its SHA-256: %w", err)
	}
	_ = os.Remove(f.Name()) // unlinked at once where the system allows (not Windows): nothing stays behind
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, max+1))
	if err == nil && n > max {
		err = usagef("import - (stdin): over %d MiB, more than a daemon takes by default; give --sha256 HEX (the digest export printed) to stream it", max>>20)
	} else if err != nil {
		err = fmt.Errorf("spooling stdin to compute its SHA-256 (give --sha256 HEX to stream it instead): %w", err)
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return nil, "", err
	}
	return f, hex.EncodeToString(h.Sum(nil)), nil
}
