package function

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/nsbox"
	"github.com/zygo-run/zygo/internal/trusted"
)

// Host directories an interpreter's bind (nsbox.InterpreterBind) may not
// be, contain, or lie inside: host configuration and credentials, kernel
// and device filesystems, runtime state and world-writable scratch space.
var noBindTree = []string{"/etc", "/root", "/proc", "/sys", "/dev", "/run", "/boot", "/lost+found"}

// Host directories an interpreter's bind may lie inside but not be or
// contain (each holds other users' and services' data as a whole).
var noBindWhole = []string{"/home", "/var", "/srv", "/mnt", "/media"}

// Host scratch directories anyone may write: an interpreter's bind may lie
// inside one (a virtual environment made under /tmp) but not be or contain
// it, and then the bind and each of its ancestors must be owned by root or
// the daemon's uid and writable by no one else (trusted.Dir), so that no
// other user can swap the interpreter a function runs on.
var scratchDirs = []string{"/tmp", "/var/tmp"}

// checkInterpreter fails (errdefs.ErrInvalidArgument, naming
// zygo.toml's interpreter key) unless interp is an executable ELF regular
// file whose bind into the sandbox exposes nothing sensitive: none of
// noBindTree, noBindWhole, scratchDirs or the daemon's state directory (after
// resolving symbolic links, as bwrap does); a bind inside a scratch directory
// must be one no other user can change. The interpreter is never run here.
// Messages name only interp and the directory derived from it.
func (m *Manager) checkInterpreter(interp string) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: zygo.toml: interpreter: %q %w", errdefs.ErrInvalidArgument, interp, fmt.Errorf(format, a...))
	}
	st, err := os.Stat(interp)
	switch {
	case err != nil:
		return bad("is not found on this host")
	case !st.Mode().IsRegular():
		return bad("is not a regular file")
	case st.Mode()&0o111 == 0:
		return bad("is not executable")
	}
	if !isELF(interp) {
		return bad("is not an ELF executable (scripts and wrappers cannot be interpreters)")
	}
	bind := nsbox.InterpreterBind(interp)
	if bind == "" {
		return nil
	}
	forbidden := m.forbiddenBinds()
	for _, p := range []string{bind, resolved(bind)} {
		if reason := forbidden(p); reason != "" {
			return bad("would bind %s into the sandbox, which %s; install the interpreter under /usr or its own directory (for example /opt/python3.12/bin/python3)", bind, reason)
		}
	}
	for _, p := range []string{bind, resolved(bind)} {
		if reason := sharedInScratch(p, os.Geteuid()); reason != "" {
			return bad("would bind %s from inside %s, where anyone may create files, but %s: another user could swap the interpreter; "+
				"make every directory from there down root's (or the daemon's uid's) and writable by its owner only", bind, scratchOf(p), reason)
		}
	}
	return nil
}

// scratchOf returns the member of scratchDirs dir lies inside, or "".
func scratchOf(dir string) string {
	for _, s := range scratchDirs {
		if dir != s && within(dir, s) {
			return s
		}
	}
	return ""
}

// sharedInScratch says why dir, inside a scratch directory, could be changed by a user other
// than root and euid: the first directory from dir up to (not including) the scratch
// directory that another uid owns, that is a symbolic link, or that its group or others may
// write. "" when there is none, or when dir is not inside a scratch directory.
func sharedInScratch(dir string, euid int) string {
	top := scratchOf(dir)
	if top == "" {
		return ""
	}
	for p := dir; p != top; p = filepath.Dir(p) {
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Sprintf("%s cannot be checked", p)
		}
		uid, _ := trusted.Owner(fi)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			return fmt.Sprintf("%s is a symbolic link", p)
		case uid != 0 && uid != euid:
			return fmt.Sprintf("%s is owned by uid %d", p, uid)
		case fi.Mode().Perm()&0o022 != 0:
			return fmt.Sprintf("%s (mode %o) is writable by its group or others", p, fi.Mode().Perm())
		}
	}
	return ""
}

// interpreterFailed names zygo.toml's interpreter when a deploy's first start failed with
// one set: checkInterpreter never runs it, so an executable that is not the runtime's
// interpreter (interpreter = "/bin/sh" for python) passes it and is found out only when
// Zygo's agent never comes up under it (unavailable, or its ready timeout). That is the
// manifest's fault, a 400 naming the key, with the start's own error (the interpreter's last
// output) kept as the cause. Any other err, or one under the runtime's default interpreter
// (defaultInterpreter: zygo.toml names none, or names that one; a failure is then the
// host's or Zygo's, such as bwrap refusing a mount), is returned as it is. Decided from
// Interpreter's value alone, so a manifest read back from the store (a rollback) is judged
// as its deploy was.
func interpreterFailed(m *Manifest, err error) error {
	if m.Interpreter == "" || m.Interpreter == defaultInterpreter(m.Runtime) || !(errdefs.IsUnavailable(err) || errors.Is(err, errdefs.ErrDeadlineExceeded)) {
		return err
	}
	return fmt.Errorf("%w: zygo.toml: interpreter: %q did not start Zygo's %s agent (is it a %s interpreter?): %w",
		errdefs.ErrInvalidArgument, m.Interpreter, m.Runtime, m.Runtime, err)
}

// forbiddenBinds returns a func saying why a host directory may not be
// bound into a sandbox ("" when it may).
func (m *Manager) forbiddenBinds() func(dir string) string {
	state := []string{m.cfg.StateDir}
	if abs, err := filepath.Abs(m.cfg.StateDir); err == nil {
		state = append(state, abs, resolved(abs))
	}
	return func(dir string) string {
		if dir == "/" {
			return "is the host's root"
		}
		for _, s := range state {
			if within(dir, s) || within(s, dir) {
				return "holds the daemon's state"
			}
		}
		for _, s := range noBindTree {
			if within(dir, s) || within(s, dir) {
				return "holds host configuration, devices or scratch space"
			}
		}
		for _, s := range noBindWhole {
			if within(s, dir) {
				return "holds other users' or services' data"
			}
		}
		for _, s := range scratchDirs {
			if within(s, dir) {
				return "holds scratch space anyone may write"
			}
		}
		return ""
	}
}

// within reports whether path is dir or below it (both clean and absolute).
func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// resolved returns p with symbolic links resolved, or p when that fails.
func resolved(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// isELF reports whether the regular file at path starts with the ELF magic.
// It opens non-blocking and re-checks the type, so a FIFO swapped in after
// the Stat cannot hang the deploy.
func isELF(path string) bool {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return false
	}
	var magic [4]byte
	if _, err := f.ReadAt(magic[:], 0); err != nil {
		return false
	}
	return bytes.Equal(magic[:], []byte("\x7fELF"))
}

// CheckInterpreter is checkInterpreter for a daemon whose state directory
// is stateDir: the same rules for what runs other than a function (a
// runtime pool, internal/pool).
func CheckInterpreter(stateDir, interp string) error {
	return (&Manager{cfg: Config{StateDir: stateDir}}).checkInterpreter(interp)
}

// SecureCodeDir is secureCodeDir for code other than a function's (a
// runtime pool's boot module and scripts): group gid (-1 keeps it),
// directories 0750, files 0440 (0550 when executable).
func SecureCodeDir(dir string, gid int) error { return secureCodeDir(dir, gid) }
