package pool

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mountRO returns a detached, read-only mount of directory dir: a clone
// of the mount tree at dir (open_tree OPEN_TREE_CLONE, close-on-exec) made
// read-only, nosuid, nodev and noexec (mount_setattr), attached nowhere.
// The caller owns the file; the mount disappears with its last descriptor.
// Sent to a pool request's child with GO, it is the only way the child
// reaches the script: through /proc/self/fd/N, whose ".." at the mount's
// root stays at its root (the mount has no parent), so nothing beside the
// script's directory is reachable through it.
//
// Errors: EPERM when the daemon lacks CAP_SYS_ADMIN (not root), ENOSYS on
// kernels before 5.12 (mount_setattr); the caller then falls back to
// copying the files into the request directory, and logs it.
func mountRO(dir string) (*os.File, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("open_tree of the script's directory: %w", err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mount_setattr read-only on the script's mount: %w", err)
	}
	return os.NewFile(uintptr(fd), "script-mount:"+dir), nil
}
