package backup

import (
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
)

// lockFile is the daemon's lock in its state dir (daemon.lockStateDir): held while a daemon
// runs there, and by Restore while it writes.
const lockFile = "zygo.lock"

// Restore writes the backup in dir into stateDir (made 0711 if missing). It refuses a state dir
// that holds anything (a restore over a live state would mix two) unless force is set, and
// always refuses one a daemon is running on; with force, what a backup holds (the store, the
// key, the token, versions/, images/) is replaced and the rest is left to the next daemon's
// start. Every file is checked against the Manifest's size and SHA-256 before anything is
// written. The next `zygo serve` on stateDir serves the restored functions; their code is
// made each function's own again at that start. Errors wrap errdefs.ErrInvalidArgument (not a
// backup, a damaged one, a state dir in use or not empty).
func Restore(dir, stateDir string, force bool) (*Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	for _, f := range m.Files {
		sum, size, err := hashFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil {
			return nil, fmt.Errorf("%w: backup file %s is missing or differs from the backup's manifest: the backup is damaged: %w",
				errdefs.ErrInvalidArgument, f.Path, err)
		}
		if sum != f.SHA256 || size != f.Size {
			return nil, fmt.Errorf("%w: backup file %s is missing or differs from the backup's manifest: the backup is damaged",
				errdefs.ErrInvalidArgument, f.Path)
		}
	}
	if err := os.MkdirAll(stateDir, 0o711); err != nil {
		return nil, fmt.Errorf("creating the state dir: %w", err)
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
		if err := restoreFile(dir, stateDir, f); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ReadManifest reads and checks the Manifest of the backup in dir: its format, and that every
// path is one a backup holds (no escape from dir or the state dir).
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not a Zygo backup (no readable %s): %w", errdefs.ErrInvalidArgument, dir, ManifestFile, err)
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

// restoreFile copies backup file f from dir into stateDir with its mode; directories on the
// way are made 0700 (versions/ itself 0711, as the daemon makes it; the daemon's start gives
// each function's code its group and modes again).
func restoreFile(dir, stateDir string, f File) error {
	dst := filepath.Join(stateDir, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("restoring %s: %w", f.Path, err)
	}
	if strings.HasPrefix(f.Path, versionDir+"/") {
		if err := os.Chmod(filepath.Join(stateDir, versionDir), 0o711); err != nil {
			return fmt.Errorf("restoring %s: %w", f.Path, err)
		}
	}
	in, err := os.Open(filepath.Join(dir, filepath.FromSlash(f.Path)))
	if err != nil {
		return fmt.Errorf("restoring %s: %w", f.Path, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, os.FileMode(f.Mode)&0o777)
	if err != nil {
		return fmt.Errorf("restoring %s: %w", f.Path, err)
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(dst, os.FileMode(f.Mode)&0o777)
	}
	if err != nil {
		return fmt.Errorf("restoring %s: %w", f.Path, errors.Join(err, os.Remove(dst)))
	}
	return nil
}
