// Package trusted checks that a host directory the daemon keeps its own
// state in (the state dir, the uid-range claims) can be modified by no one
// but root and the daemon's own euid. A directory anyone else could write,
// or that sits under one, lets that user rename what the daemon made there
// (its socket, its code dirs) and plant their own.
package trusted

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Dir fails unless dir and every ancestor of it, both as written and with
// symbolic links resolved, is owned by root or euid and neither group- nor
// other-writable; an ancestor that is root-owned and sticky (like /tmp) may
// be writable, since others cannot rename what is in it. dir must exist and
// be absolute. The error names the path, its owner and mode: it is an
// operator's message.
func Dir(dir string, euid int) error { return check(dir, euid, true) }

// Ancestor is Dir for a directory the caller will create something in (the nearest existing
// ancestor of a directory to make): it may itself be a root-owned sticky one like /tmp.
func Ancestor(dir string, euid int) error { return check(dir, euid, false) }

// File is Dir for a file the daemon reads its configuration from or executes
// as root (or hands to a sandbox): the file and every directory above it,
// as written and resolved, must be owned by root or euid and writable by
// neither group nor others (a root-owned sticky ancestor like /tmp is fine),
// and it must be a regular file. The error names the path and why.
func File(path string, euid int) error {
	if err := check(path, euid, true); err != nil {
		return err
	}
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	return nil
}

func check(dir string, euid int, leaf bool) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("checking %s: not an absolute path", dir)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("resolving %s: %w", dir, err)
	}
	for _, p := range []string{filepath.Clean(dir), real} {
		if err := chain(p, euid, leaf); err != nil {
			return err
		}
	}
	return nil
}

// chain checks p and each of its ancestors up to /. Components that are
// symbolic links are skipped (a link cannot be changed, only replaced, which
// needs write access to its parent, checked here); Dir checks the resolved
// path too.
func chain(p string, euid int, leaf bool) error {
	for cur := p; ; cur, leaf = filepath.Dir(cur), false {
		fi, err := os.Lstat(cur)
		if err != nil {
			return fmt.Errorf("checking %s: %w", cur, err)
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			if err := component(cur, fi, euid, leaf); err != nil {
				return err
			}
		}
		if cur == "/" {
			return nil
		}
	}
}

// component checks one directory: leaf (the dir itself) may not use the
// sticky exception, since who can create entries in it matters.
func component(p string, fi os.FileInfo, euid int, leaf bool) error {
	uid, _ := Owner(fi)
	if uid != 0 && uid != euid {
		return fmt.Errorf("%s is owned by uid %d (%s), not by root or the daemon's uid %d: another user could replace what the daemon keeps under it; "+
			"use a directory owned by root (or by uid %d) on a path only root can change", p, uid, userName(uid), euid, euid)
	}
	perm := fi.Mode()
	if perm.Perm()&0o022 == 0 || (!leaf && uid == 0 && perm&os.ModeSticky != 0) {
		return nil
	}
	return fmt.Errorf("%s (mode %o) is writable by its group or by others: another user could replace what the daemon keeps under it; `chmod go-w %s`",
		p, perm.Perm(), p)
}

// Entries fails, naming the first such path and its owner, when an entry
// directly in dir is not owned by euid: something another user put there
// before the daemon took the directory over. A directory entry must also not
// be group- or other-writable.
func Entries(dir string, euid int) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("listing %s: %w", dir, err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(p)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("checking %s: %w", p, err)
		}
		if uid, _ := Owner(fi); uid != euid {
			return fmt.Errorf("%s is owned by uid %d (%s), not by the daemon's uid %d: someone else put it there; remove it (or the whole directory) and start again",
				p, uid, userName(uid), euid)
		}
		if fi.IsDir() && fi.Mode().Perm()&0o022 != 0 {
			return fmt.Errorf("%s (mode %o) is writable by its group or by others: `chmod go-w %s`", p, fi.Mode().Perm(), p)
		}
	}
	return nil
}

// Owner returns fi's owner uid and gid (-1, -1 when fi has no Stat_t).
func Owner(fi os.FileInfo) (uid, gid int) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, -1
	}
	return int(st.Uid), int(st.Gid)
}

// userName returns uid's login name, or "no account" when it has none.
func userName(uid int) string {
	if u, err := lookupUser(uid); err == nil {
		return u
	}
	return "no account"
}
