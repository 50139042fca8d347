package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// Images of sandboxes that hold secrets. A checkpoint image is the sandbox's memory, so a
// secret's value is in it in plain text. Such images are written to
// ManagerConfig.SecretImageDir, a memory filesystem, and never to ImageDir: the value never
// reaches a disk. They survive a daemon restart (the filesystem stays mounted) but not a
// reboot; a checkpoint whose image is gone is lost (CheckpointRecord.Lost), which fork and
// rollback refuse with errdefs.ErrFailedPrecondition.

// imageDirFor returns the directory a checkpoint of a sandbox with opts is written to. Errors
// wrap errdefs.ErrFailedPrecondition when opts names secrets and there is no secret image dir,
// or it is not on a memory filesystem (any more).
func (m *Manager) imageDirFor(opts CreateOptions) (string, error) {
	if len(opts.Secrets) == 0 {
		return m.cfg.ImageDir, nil
	}
	if m.cfg.SecretImageDir == "" {
		return "", fmt.Errorf("the sandbox holds secrets and this daemon has no memory filesystem for their images: %w",
			errdefs.ErrFailedPrecondition)
	}
	if err := checkMemoryFS(m.cfg.SecretImageDir); err != nil {
		return "", fmt.Errorf("the sandbox holds secrets: %w: %w", err, errdefs.ErrFailedPrecondition)
	}
	return m.cfg.SecretImageDir, nil
}

// checkMemoryFS fails unless dir is on a tmpfs or ramfs.
func checkMemoryFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("secret image dir: %w", err)
	}
	if st.Type != unix.TMPFS_MAGIC && st.Type != unix.RAMFS_MAGIC {
		return errors.New("the secret image dir is not on a memory filesystem (tmpfs, ramfs)")
	}
	return nil
}

// imageLost reports whether cp's image directory is gone (an in-memory image after a reboot).
func imageLost(cp CheckpointRecord) bool {
	_, err := os.Stat(cp.Dir)
	return errors.Is(err, fs.ErrNotExist)
}

// withLost returns cps with Lost set on those whose image is gone.
func withLost(cps []CheckpointRecord) []CheckpointRecord {
	for i := range cps {
		cps[i].Lost = imageLost(cps[i])
	}
	return cps
}

// lostImageError is the error of a fork or rollback from a lost checkpoint.
func lostImageError(cp CheckpointRecord) error {
	return fmt.Errorf("checkpoint %s is lost: its image was held in memory (its sandbox held secrets) and the host "+
		"restarted since: %w", cp.ID, errdefs.ErrFailedPrecondition)
}
