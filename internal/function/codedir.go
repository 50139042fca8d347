package function

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// A function's code is its own: versions/NAME and everything under it is
// owned by the daemon with the function's gid as group, directories 0750
// and files 0440 (0550 when executable), so that the function's sandboxes
// (which run as that uid and gid) read it and no other function, local
// user or nobody does.

// hostIDOwner is the owner name of a function's host id.
func hostIDOwner(name string) string { return "function:" + name }

// hostID returns the host uid (and gid) the function's sandboxes run as; 0
// (the daemon's own) without Config.HostIDs. Errors wrap
// errdefs.ErrUnavailable when no id is free.
func (m *Manager) hostID(ctx context.Context, name string) (uint32, error) {
	if m.cfg.HostIDs == nil {
		return 0, nil
	}
	id, err := m.cfg.HostIDs.Acquire(ctx, hostIDOwner(name))
	if err != nil {
		return 0, fmt.Errorf("giving function %q a uid: %w", name, err)
	}
	return id, nil
}

// gidOf returns the group a function's files get: uid's number, or -1
// (unchanged) for 0, the daemon's own.
func gidOf(uid uint32) int {
	if uid == 0 {
		return -1
	}
	return int(uid)
}

// secureCodeDir gives every entry under dir (dir included) the group gid
// (-1 keeps it) and the modes above. It is idempotent. dir is the daemon's
// own (no sandbox can write it), so walking it by path is safe.
func secureCodeDir(dir string, gid int) error {
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type()&fs.ModeSymlink != 0 {
			return os.Lchown(p, -1, gid)
		}
		mode := os.FileMode(0o750)
		if !e.IsDir() {
			info, err := e.Info()
			if err != nil {
				return err
			}
			mode = 0o440 | info.Mode().Perm()&0o110
		}
		if err := os.Lchown(p, -1, gid); err != nil {
			return err
		}
		return os.Chmod(p, mode)
	})
	if err != nil {
		return fmt.Errorf("securing the function's code: %w", err)
	}
	return nil
}
