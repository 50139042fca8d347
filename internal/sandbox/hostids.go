package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// HostIDs hands out host ids, one per owner string, and keeps each owner's across restarts;
// *hostid.Allocator is the daemon's.
type HostIDs interface {
	// Acquire returns owner's id, handing it one first if it has none. Errors wrap
	// errdefs.ErrUnavailable when none is free.
	Acquire(ctx context.Context, owner string) (uint32, error)
	// Release gives owner's id back; the caller has stopped every process of the owner.
	Release(ctx context.Context, owner string) error
}

// hostIDOwner is the HostIDs owner of sandbox id.
func hostIDOwner(id string) string { return "sandbox:" + id }

// hostUID returns sandbox id's host uid, 0 without ManagerConfig.HostIDs.
func (m *Manager) hostUID(ctx context.Context, id string) (uint32, error) {
	if m.cfg.HostIDs == nil {
		return 0, nil
	}
	uid, err := m.cfg.HostIDs.Acquire(ctx, hostIDOwner(id))
	if err != nil {
		return 0, fmt.Errorf("giving sandbox %s a host uid: %w", id, err)
	}
	return uid, nil
}

// releaseHostUID gives sandbox id's host uid back, once its engine instance is destroyed.
func (m *Manager) releaseHostUID(ctx context.Context, id string) error {
	if m.cfg.HostIDs == nil {
		return nil
	}
	if err := m.cfg.HostIDs.Release(ctx, hostIDOwner(id)); err != nil {
		return fmt.Errorf("releasing the host uid of sandbox %s: %w", id, err)
	}
	return nil
}

// rootfsReachable returns an error wrapping errdefs.ErrInvalidArgument, naming the directory,
// when sandboxes run as uids of their own (HostIDs) and a directory on the way to dir (or dir
// itself) cannot be traversed by others: the engine, running as the sandbox's uid, could not
// reach the root. "" (the default root) is always reachable.
func (m *Manager) rootfsReachable(dir string) error {
	if m.cfg.HostIDs == nil || dir == "" {
		return nil
	}
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("rootfs %q: %w", dir, errdefs.ErrInvalidArgument)
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("rootfs %q: %s (mode %o) cannot be traversed by the sandbox's own uid; "+
				"`chmod o+x` it (files the guest reads need o+r): %w", dir, d, st.Mode().Perm(), errdefs.ErrInvalidArgument)
		}
		if d == "/" {
			return nil
		}
	}
}
