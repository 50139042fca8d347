package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// Directories are copied file by file over the files routes the API already has (one PUT per
// file, which creates parent directories; GET files/list then one GET per file), not through
// a tar route: each file keeps the guest's checks (no symlinks followed, writes appear whole)
// and its error names the file, and the API gains no second way to write into a sandbox.
// What is copied: regular files (with their permission bits) and directories; symbolic links
// and special files are skipped, each reported on stderr. An empty directory is not created
// by put (the API makes directories only as parents of a file). As with `docker cp`, a DEST
// that is an existing directory receives SRC under its own name; otherwise DEST becomes the copy.

// putDir copies the local directory src into the sandbox id at dest (see above), reporting
// skipped entries to warn. It returns the first error.
func putDir(ctx context.Context, c *zygo.Client, id, src, dest string, warn io.Writer) error {
	if _, err := c.ListFiles(ctx, id, dest); err == nil {
		dest = path.Join(dest, filepath.Base(filepath.Clean(src)))
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			fmt.Fprintf(warn, "zygo: skipping %s: not a regular file or directory\n", p)
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		target := path.Join(dest, filepath.ToSlash(rel))
		if err := c.PutFile(ctx, id, target, uint32(st.Mode().Perm()), f); err != nil {
			return fmt.Errorf("copying %s to %s: %w", p, target, err)
		}
		return nil
	})
}

// isSandboxDir reports whether p is a directory inside the sandbox id.
func isSandboxDir(ctx context.Context, c *zygo.Client, id, p string) bool {
	clean := path.Clean(p)
	if clean == "/" {
		return true
	}
	// The list route answers for a file too (the file itself), so the parent's listing says
	// what p is; a parent too large to list whole is asked about p itself.
	base := path.Base(clean)
	if ls, err := c.ListFiles(ctx, id, path.Dir(clean)); err == nil {
		for _, e := range ls.Entries {
			if e.Name == base {
				return e.IsDir
			}
		}
		if ls.Total <= len(ls.Entries) {
			return false // not there
		}
	}
	ls, err := c.ListFiles(ctx, id, clean)
	return err == nil && !(len(ls.Entries) == 1 && !ls.Entries[0].IsDir && ls.Entries[0].Name == base)
}

// getDir copies the directory src inside the sandbox id to the local dest (see above),
// reporting skipped entries to warn. Names from the sandbox are taken only when they are one
// local path element (no "/", no ".."). A directory of more entries than one listing holds
// (wire.MaxListEntries) is refused. It returns the first error.
func getDir(ctx context.Context, c *zygo.Client, id, src, dest string, warn io.Writer) error {
	if st, err := os.Stat(dest); err == nil && st.IsDir() {
		dest = filepath.Join(dest, path.Base(path.Clean(src)))
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	ls, err := c.ListFiles(ctx, id, src)
	if err != nil {
		return err
	}
	if ls.Total > len(ls.Entries) {
		return fmt.Errorf("%s has %d entries, more than the %d one listing holds: copy its subdirectories one by one", src, ls.Total, wire.MaxListEntries)
	}
	for _, fi := range ls.Entries {
		if !filepath.IsLocal(fi.Name) || filepath.Base(fi.Name) != fi.Name {
			fmt.Fprintf(warn, "zygo: skipping %q in %s: not a plain name\n", fi.Name, src)
			continue
		}
		from, to := path.Join(src, fi.Name), filepath.Join(dest, fi.Name)
		switch {
		case fi.IsDir:
			if err := getDir(ctx, c, id, from, to, warn); err != nil {
				return err
			}
		case fi.Mode.Type().IsRegular():
			if err := getFile(ctx, c, id, from, to, fi.Mode.Perm()); err != nil {
				return err
			}
		default:
			fmt.Fprintf(warn, "zygo: skipping %s: not a regular file or directory\n", from)
		}
	}
	return nil
}

// getFile copies the file src inside the sandbox id to the local path dest with permission
// bits perm, through dest.zygo-partial: dest appears whole or not at all.
func getFile(ctx context.Context, c *zygo.Client, id, src, dest string, perm fs.FileMode) error {
	tmp := dest + ".zygo-partial"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := c.GetFile(ctx, id, src, f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dest)
}

// errStdoutDir is files get of a directory to stdout.
var errStdoutDir = errors.New("is a directory: give a local DEST directory to copy it to")
