package backup

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/trusted"
	"github.com/zygo-run/zygo/internal/untrusted"
)

// lockFile is the daemon's lock in its state dir (daemon.lockStateDir): held while a daemon
// runs there, and by Restore while it writes.
const lockFile = "zygo.lock"

// maxManifest bounds the size of a backup's Manifest in bytes.
const maxManifest = 256 << 20

// Restore writes the backup in dir into stateDir (made 0711 if missing; it must be one no other
// user can change, as zygo serve requires). It refuses a state dir that holds anything (a
// restore over a live state would mix two) unless force is set, and always refuses one a daemon
// is running on; with force, what a backup holds (the store, the key, the token, versions/,
// images/) is replaced and the rest is left to the next daemon's start. Every file of dir is
// read through internal/untrusted (a link at any component, a FIFO or a device is refused,
// never followed or waited on) and checked against the Manifest's size and SHA-256 before
// anything is written; then each is copied into a temporary file beside its place, hashed as
// it is copied, and renamed into place only when that hash matches too. Modes come from the
// Manifest only as far as restoreMode allows. The next `zygo serve` on stateDir serves the
// restored functions; their code is made each function's own again at that start. Errors wrap
// errdefs.ErrInvalidArgument (not a backup, a damaged one, a state dir in use or not empty).
func Restore(dir, stateDir string, force bool) (*Manifest, error) {
	ctx := context.Background()
	src, err := openBackup(dir)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	m, err := readManifest(ctx, src)
	if err != nil {
		return nil, err
	}
	for _, f := range m.Files {
		if err := checkFile(ctx, src, f); err != nil {
			return nil, err
		}
	}
	if err := makeStateDir(stateDir); err != nil {
		return nil, err
	}
	unlock, err := lock(stateDir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := checkEmpty(stateDir, force); err != nil {
		return nil, err
	}
	for _, name := range []string{dbFile, dbFile + "-wal", dbFile + "-shm", keyFile, tokenFile, versionDir, imageDir} {
		if err := os.RemoveAll(filepath.Join(stateDir, name)); err != nil {
			return nil, fmt.Errorf("clearing the state dir: %w", err)
		}
	}
	for _, f := range m.Files {
		if err := restoreFile(ctx, src, stateDir, f); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// openBackup opens the backup dir (its last component may not be a link).
func openBackup(dir string) (*untrusted.Dir, error) {
	src, err := untrusted.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not a Zygo backup (not a directory that can be opened): %w", errdefs.ErrInvalidArgument, dir, err)
	}
	return src, nil
}

// checkFile fails unless backup file f of src is a regular file of f's size and SHA-256.
func checkFile(ctx context.Context, src *untrusted.Dir, f File) error {
	d, err := hashFile(ctx, src, f.Path, f.Size)
	if errors.Is(err, untrusted.ErrNotRegular) {
		return notRegular(f.Path)
	}
	if err != nil {
		return fmt.Errorf("%w: backup file %s is missing or differs from the backup's manifest: the backup is damaged: %w",
			errdefs.ErrInvalidArgument, f.Path, err)
	}
	if d.sum != f.SHA256 || d.size != f.Size {
		return fmt.Errorf("%w: backup file %s is missing or differs from the backup's manifest: the backup is damaged",
			errdefs.ErrInvalidArgument, f.Path)
	}
	return nil
}

// notRegular is the error for a backup file that is not a regular file of its own.
func notRegular(p string) error {
	return fmt.Errorf("%w: backup file %s is not a regular file (a symbolic link on its path, a FIFO, a device or a hard link): refused, nothing restored",
		errdefs.ErrInvalidArgument, p)
}

// makeStateDir makes stateDir 0711 if missing and fails unless no other user can change it.
func makeStateDir(stateDir string) error {
	if err := os.MkdirAll(stateDir, 0o711); err != nil {
		return fmt.Errorf("creating the state dir: %w", err)
	}
	abs, err := filepath.Abs(stateDir)
	if err == nil {
		err = trusted.Dir(abs, os.Geteuid())
	}
	if err != nil {
		return fmt.Errorf("%w: state dir: %w", errdefs.ErrInvalidArgument, err)
	}
	return nil
}

// ReadManifest reads and checks the Manifest of the backup in dir: its format, and that every
// path is one a backup holds (no escape from dir or the state dir).
func ReadManifest(dir string) (*Manifest, error) {
	src, err := openBackup(dir)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	return readManifest(context.Background(), src)
}

func readManifest(ctx context.Context, src *untrusted.Dir) (*Manifest, error) {
	b, err := src.ReadFile(ctx, ManifestFile, maxManifest)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not a Zygo backup (no readable %s): %w", errdefs.ErrInvalidArgument, src.Path(), ManifestFile, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errdefs.ErrInvalidArgument, ManifestFile, err)
	}
	if m.Format != Format {
		return nil, fmt.Errorf("%w: %s: format %d, but this zygo reads format %d", errdefs.ErrInvalidArgument, ManifestFile, m.Format, Format)
	}
	for _, f := range m.Files {
		if !validPath(f.Path) {
			return nil, fmt.Errorf("%w: %s: %q is not a path a backup holds", errdefs.ErrInvalidArgument, ManifestFile, f.Path)
		}
	}
	return &m, nil
}

// validPath reports whether p is a clean relative path of a part a backup holds.
func validPath(p string) bool {
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
		return false
	}
	switch top, _, _ := strings.Cut(p, "/"); top {
	case dbFile, keyFile, tokenFile:
		return top == p
	case versionDir, imageDir:
		return top != p
	}
	return false
}

// lock takes the daemon's lock of stateDir, failing when a daemon holds it.
func lock(stateDir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(stateDir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking the state dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: a zygo daemon is running on %s: stop it first", errdefs.ErrFailedPrecondition, stateDir)
	}
	return func() { f.Close() }, nil
}

// checkEmpty fails unless stateDir holds nothing but the lock (or force is set).
func checkEmpty(stateDir string, force bool) error {
	ents, err := os.ReadDir(stateDir)
	if err != nil {
		return fmt.Errorf("reading the state dir: %w", err)
	}
	for _, e := range ents {
		if e.Name() != lockFile && !force {
			return fmt.Errorf("%w: state dir %s is not empty (it holds %s): restore into a new one, or pass --force to replace its store, key, versions and images",
				errdefs.ErrInvalidArgument, stateDir, e.Name())
		}
	}
	return nil
}

// restoreMode is the mode backup file f is restored with: the Manifest's, but never more
// than the daemon gives: the store, the key and the token 0600, anything else at most 0755
// (no setuid, setgid or sticky bit, never group- or other-writable; 0644 at most without an
// execute bit).
func restoreMode(f File) os.FileMode {
	switch f.Path {
	case dbFile, dbFile + "-wal", dbFile + "-shm", keyFile, tokenFile:
		return 0o600
	}
	return os.FileMode(f.Mode) & 0o755
}

// restoreFile copies backup file f from src into stateDir: into a temporary name beside its
// place (created exclusively, never through a link), hashing what it copies (at most f.Size+1
// bytes), then renamed into place only when that matches the Manifest. Directories on the
// way are made 0700 (versions/ itself 0711, as the daemon makes it; the daemon's start gives
// each function's code its group and modes again).
func restoreFile(ctx context.Context, src *untrusted.Dir, stateDir string, f File) error {
	dst := filepath.Join(stateDir, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("restoring %s: %w", f.Path, err)
	}
	if strings.HasPrefix(f.Path, versionDir+"/") {
		if err := os.Chmod(filepath.Join(stateDir, versionDir), 0o711); err != nil {
			return fmt.Errorf("restoring %s: %w", f.Path, err)
		}
	}
	into, err := untrusted.OpenDir(filepath.Dir(dst))
	if err != nil {
		return fmt.Errorf("restoring %s: %w", f.Path, err)
	}
	defer into.Close()
	tmp := ".zygo-restore-" + rand.Text()
	if err := copyChecked(ctx, src, f, into, tmp); err != nil {
		return errors.Join(err, into.Remove(tmp))
	}
	if err := into.Rename(tmp, filepath.Base(dst)); err != nil {
		return fmt.Errorf("restoring %s: %w", f.Path, errors.Join(err, into.Remove(tmp)))
	}
	return nil
}

// copyChecked copies backup file f of src to the new file tmp of into with restoreMode(f),
// failing unless what it copied has f's size and SHA-256.
func copyChecked(ctx context.Context, src *untrusted.Dir, f File, into *untrusted.Dir, tmp string) error {
	in, err := src.Open(f.Path)
	if errors.Is(err, untrusted.ErrNotRegular) {
		return notRegular(f.Path)
	}
	if err != nil {
		return fmt.Errorf("restoring %s: %w", f.Path, err)
	}
	defer in.Close()
	out, err := into.Create(tmp, 0o600)
	if err != nil {
		return fmt.Errorf("restoring %s: %w", f.Path, err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(readerCtx{ctx, in}, f.Size+1))
	if err == nil {
		err = out.Chmod(restoreMode(f))
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("restoring %s: %w", f.Path, err)
	}
	if n != f.Size || hex.EncodeToString(h.Sum(nil)) != f.SHA256 {
		return fmt.Errorf("%w: backup file %s changed after it was checked (it differs from the backup's manifest now): nothing more restored",
			errdefs.ErrInvalidArgument, f.Path)
	}
	return nil
}
