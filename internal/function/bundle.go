package function

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// Bundle limits. A bundle is the gzip'd tar of a function directory that
// `zygo up` uploads.
const (
	MaxBundleBytes   = 64 << 20  // compressed upload, bytes
	MaxUnpackedBytes = 256 << 20 // sum of file sizes, bytes
	MaxBundleFiles   = 10_000
	MaxPathBytes     = 1024 // one bundle path, bytes
	MaxNameBytes     = 255  // one component of a bundle path, bytes (NAME_MAX)
)

// PackDir writes DIR as a gzip'd tar to w (zygo.PackDir, the SDK's, is the one
// implementation): regular files and directories only, paths relative to DIR.
// Symbolic links and other special files are an error wrapping
// errdefs.ErrInvalidArgument and naming the path (a bundle must not point
// outside itself). Hidden directories named .git are skipped.
func PackDir(dir string, w io.Writer) error {
	err := zygo.PackDir(dir, w)
	if errors.Is(err, zygo.ErrSpecialFile) {
		return fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	return err
}

// File is one regular file of a bundle.
type File struct {
	Path string // slash-separated, relative, clean
	Mode int64  // 0644 or 0755
	Data []byte
}

// Unpacked is a bundle read into memory and checked.
type Unpacked struct {
	Files    []File // sorted by Path
	Manifest *Manifest
	Hash     string // "sha256:<hex>" over paths, modes and contents
}

// ReadBundle reads a gzip'd tar from r, at most MaxBundleBytes compressed and
// MaxUnpackedBytes unpacked, parses its zygo.toml and computes its content
// hash. Errors wrap errdefs.ErrInvalidArgument (bad archive, bad manifest,
// unsafe path) or errdefs.ErrTooLarge.
func ReadBundle(r io.Reader) (*Unpacked, error) {
	lr := &io.LimitedReader{R: r, N: MaxBundleBytes + 1}
	gz, err := gzip.NewReader(lr)
	if err != nil {
		return nil, fmt.Errorf("%w: bundle is not gzip: %w", errdefs.ErrInvalidArgument, err)
	}
	tr := tar.NewReader(gz)
	var files []File
	var total int64
	seen := map[string]bool{}
	dirs := map[string]bool{} // directory entries and every file's parents
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if lr.N <= 0 {
				return nil, fmt.Errorf("%w: bundle exceeds %d MiB", errdefs.ErrTooLarge, MaxBundleBytes>>20)
			}
			return nil, fmt.Errorf("%w: reading bundle: %w", errdefs.ErrInvalidArgument, err)
		}
		if h.Typeflag == tar.TypeDir && path.Clean(h.Name) == "." {
			continue // "./", as `tar -czf - .` writes it
		}
		name, err := cleanBundlePath(h.Name)
		if err != nil {
			return nil, err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			dirs[name] = true
			continue
		case tar.TypeReg:
		default:
			return nil, fmt.Errorf("%w: bundle entry %q is not a regular file", errdefs.ErrInvalidArgument, name)
		}
		total += h.Size
		if total > MaxUnpackedBytes || len(files) >= MaxBundleFiles {
			return nil, fmt.Errorf("%w: bundle exceeds %d MiB or %d files unpacked", errdefs.ErrTooLarge, MaxUnpackedBytes>>20, MaxBundleFiles)
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: bundle has %q twice", errdefs.ErrInvalidArgument, name)
		}
		seen[name] = true
		data, err := io.ReadAll(tr)
		if err != nil {
			if lr.N <= 0 { // the compressed limit cut the stream inside this file
				return nil, fmt.Errorf("%w: bundle exceeds %d MiB", errdefs.ErrTooLarge, MaxBundleBytes>>20)
			}
			return nil, fmt.Errorf("%w: reading %q: %w", errdefs.ErrInvalidArgument, name, err)
		}
		mode := int64(0o644)
		if h.Mode&0o111 != 0 {
			mode = 0o755
		}
		files = append(files, File{Path: name, Mode: mode, Data: data})
	}
	if err := checkFileDirClash(files, dirs); err != nil {
		return nil, err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	u := &Unpacked{Files: files, Hash: hashFiles(files)}
	for _, f := range files {
		if f.Path == ManifestFile {
			m, err := ParseManifest(f.Data)
			if err != nil {
				return nil, err
			}
			u.Manifest = m
		}
	}
	if u.Manifest == nil {
		return nil, fmt.Errorf("%w: bundle has no %s at its top level", errdefs.ErrInvalidArgument, ManifestFile)
	}
	for i, p := range u.Manifest.PythonPath {
		if !dirs[p] { // checkFileDirClash added every file's parents
			return nil, fmt.Errorf("%w: zygo.toml: python_path[%d]: %q is not a directory of the bundle (was it left out by .zygoignore?)",
				errdefs.ErrInvalidArgument, i, p)
		}
	}
	return u, nil
}

// checkFileDirClash fails (errdefs.ErrInvalidArgument, naming the path)
// when a file's path is also a directory: a directory entry, or the parent
// of another file. Such a bundle could not be written out.
func checkFileDirClash(files []File, dirs map[string]bool) error {
	for _, f := range files {
		for p := path.Dir(f.Path); p != "."; p = path.Dir(p) {
			dirs[p] = true
		}
	}
	for _, f := range files {
		if dirs[f.Path] {
			return fmt.Errorf("%w: bundle entry %q is both a file and a directory", errdefs.ErrInvalidArgument, f.Path)
		}
	}
	return nil
}

// cleanBundlePath returns name cleaned, or an error (errdefs.ErrInvalidArgument)
// when it is absolute, leaves the bundle, or is longer than MaxPathBytes
// or has a component longer than MaxNameBytes (it could not be written).
func cleanBundlePath(name string) (string, error) {
	c := path.Clean(strings.TrimSuffix(name, "/"))
	if c == "." || c == "" || path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%w: unsafe path %q in bundle", errdefs.ErrInvalidArgument, shorten(name))
	}
	if len(c) > MaxPathBytes {
		return "", fmt.Errorf("%w: bundle entry %q: path is %d bytes, over the limit of %d", errdefs.ErrInvalidArgument, shorten(c), len(c), MaxPathBytes)
	}
	for _, part := range strings.Split(c, "/") {
		if len(part) > MaxNameBytes {
			return "", fmt.Errorf("%w: bundle entry %q: a name is %d bytes, over the limit of %d", errdefs.ErrInvalidArgument, shorten(c), len(part), MaxNameBytes)
		}
	}
	return c, nil
}

// shorten cuts a path for a message to at most 80 bytes.
func shorten(p string) string {
	if len(p) <= 80 {
		return p
	}
	return p[:77] + "..."
}

func hashFiles(files []File) string {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%o\x00%d\x00", f.Path, f.Mode, len(f.Data))
		h.Write(f.Data)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// WriteTo writes the bundle's files under dir (created; must not exist),
// files read-only (0440 or 0550) so the version stays immutable on disk, and
// directories 0750, so that only their owner and group read the code (the
// Manager then gives the group to the function's uid, see secureCodeDir).
// On error the partial directory is removed.
func (u *Unpacked) WriteTo(dir string) (err error) {
	tmp := dir + ".partial"
	_ = os.RemoveAll(tmp)
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	for _, f := range u.Files {
		p := filepath.Join(tmp, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			return fmt.Errorf("writing bundle: %w", err)
		}
		if err := os.WriteFile(p, f.Data, os.FileMode(f.Mode&0o550)); err != nil {
			return fmt.Errorf("writing bundle: %w", err)
		}
	}
	if err := os.MkdirAll(tmp, 0o750); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("writing bundle: %w", err)
	}
	return nil
}
