package zygo

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrSpecialFile is wrapped by PackDir's error for a symbolic link, device, socket or pipe in
// the directory: a bundle must not point outside itself.
var ErrSpecialFile = errors.New("not a regular file or directory (links are not allowed in a function)")

// PackDir writes the function directory dir as the bundle Deploy uploads: a gzip'd tar of its
// regular files (mode 0755 when executable, else 0644) and directories, paths relative to dir;
// directories named .git are skipped, and so is what DefaultIgnores and dir's IgnoreFile
// (.zygoignore) leave out. A special file is an error wrapping ErrSpecialFile and naming its
// path relative to dir (unless ignored); so is a dir that is not a directory (a zygo.toml
// given for its directory, say), and an IgnoreFile line that is not a valid pattern.
func PackDir(dir string, w io.Writer) error {
	if st, err := os.Stat(dir); err != nil {
		return fmt.Errorf("packing %s: %w", dir, err)
	} else if !st.IsDir() {
		return fmt.Errorf("packing %s: not a directory: a function is the directory holding zygo.toml", dir)
	}
	ignore, err := loadIgnore(dir)
	if err != nil {
		return fmt.Errorf("packing %s: %w", dir, err)
	}
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if ignore.ignored(filepath.ToSlash(rel), d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case info.Mode().IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: filepath.ToSlash(rel) + "/", Mode: 0o755})
		case info.Mode().IsRegular():
			return packFile(tw, p, filepath.ToSlash(rel), info)
		default:
			return fmt.Errorf("%s: %w", rel, ErrSpecialFile)
		}
	})
	if err != nil {
		return fmt.Errorf("packing %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("packing %s: %w", dir, err)
	}
	return gz.Close()
}

// packFile appends the regular file at p to tw as name.
func packFile(tw *tar.Writer, p, name string, info fs.FileInfo) error {
	mode := int64(0o644)
	if info.Mode()&0o111 != 0 {
		mode = 0o755
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: info.Size()}); err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}
