package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/agentproc"
)

// The checkpoint images of sandboxes that hold secrets are their memory, secrets included:
// they live in STATE/images-mem, a tmpfs of the daemon's own (nodev, nosuid, noexec, mode
// 0700, capped at SandboxConfig.SecretImagesMiB, noswap where the kernel has it), never on the
// state dir's disk. The mount outlives the daemon while it holds images, so that a restarted
// daemon still forks and rolls back from them; a reboot loses them (the checkpoints are then
// shown as lost). A daemon that stops with no image there unmounts it.

// secretImageDir returns the directory of the in-memory images under stateDir.
func secretImageDir(stateDir string) string { return filepath.Join(stateDir, "images-mem") }

// mountSecretImages mounts the images' tmpfs on dir, or, when an earlier daemon left it
// mounted, remounts it with the size cap sizeMiB (keeping what it holds).
func mountSecretImages(dir string, sizeMiB int, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("making the secret image dir: %w", err)
	}
	mounts, err := agentproc.MountsBelow(dir)
	if err != nil {
		return err
	}
	flags := uintptr(unix.MS_NODEV | unix.MS_NOSUID | unix.MS_NOEXEC)
	opts := fmt.Sprintf("size=%dm,mode=0700", sizeMiB)
	if slices.Contains(mounts, filepath.Clean(dir)) {
		if err := unix.Mount("zygo-images", dir, "tmpfs", flags|unix.MS_REMOUNT, opts); err != nil {
			return fmt.Errorf("remounting the secret images' tmpfs: %w", err)
		}
		return nil
	}
	err = unix.Mount("zygo-images", dir, "tmpfs", flags, opts+",noswap")
	if errors.Is(err, unix.EINVAL) {
		log.Warn("this kernel has no tmpfs noswap (Linux >= 6.4): checkpoint images of sandboxes with secrets may be swapped out")
		err = unix.Mount("zygo-images", dir, "tmpfs", flags, opts)
	}
	if err != nil {
		return fmt.Errorf("mounting the secret images' tmpfs: %w", err)
	}
	return nil
}

// unmountSecretImagesIfEmpty unmounts and removes dir when it holds nothing.
func unmountSecretImagesIfEmpty(dir string, log *slog.Logger) {
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) > 0 {
		return // images stay in memory for the next daemon
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		log.Warn("unmounting the secret images' tmpfs", "err", err)
		return
	}
	_ = os.Remove(dir)
}
