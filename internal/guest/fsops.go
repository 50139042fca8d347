package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Filesystem operations on paths inside the sandbox (the agent's own view of it). Symlinks
// are described, never followed, except the path a listing or a watch starts at. Every path
// the host sends is absolute; the Manager checks that before the call.

// errTooLarge marks an answer over its bound (the host reads it as errdefs.ErrTooLarge).
var errTooLarge = errors.New("too large")

// queryPath returns the cleaned absolute path in query parameter name, or an error naming it.
func queryPath(r *http.Request, name string) (string, error) {
	p := r.URL.Query().Get(name)
	if p == "" || !filepath.IsAbs(p) {
		return "", fmt.Errorf("%s %q: want an absolute path inside the sandbox: %w", name, p, fs.ErrInvalid)
	}
	return filepath.Clean(p), nil
}

// entryInfo describes the entry at p, whose Lstat is fi.
func entryInfo(p string, fi fs.FileInfo, names idNames) EntryInfo {
	e := EntryInfo{Name: fi.Name(), Path: p, Type: EntryFile, Size: fi.Size(),
		Mode: uint32(fi.Mode().Perm()), ModTime: fi.ModTime()}
	if p == "/" {
		e.Name = "/"
	}
	m := fi.Mode()
	if m&fs.ModeSetuid != 0 {
		e.Mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		e.Mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		e.Mode |= 0o1000
	}
	switch {
	case m.IsDir():
		e.Type = EntryDir
	case m&fs.ModeSymlink != 0:
		e.Type = EntrySymlink
		e.SymlinkTarget, _ = os.Readlink(p)
	case m&fs.ModeNamedPipe != 0:
		e.Type = EntryFIFO
	case m&fs.ModeSocket != 0:
		e.Type = EntrySocket
	case m&fs.ModeCharDevice != 0:
		e.Type = EntryCharDevice
	case m&fs.ModeDevice != 0:
		e.Type = EntryBlockDevice
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner, e.Group = names.user(st.Uid), names.group(st.Gid)
	}
	return e
}

func (a *Agent) stat(p string) (EntryInfo, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return EntryInfo{}, err
	}
	return entryInfo(p, fi, a.loadIDNames()), nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (a *Agent) handleStat(w http.ResponseWriter, r *http.Request) {
	p, err := queryPath(r, "path")
	if err != nil {
		writeOpError(w, err)
		return
	}
	e, err := a.stat(p)
	if err != nil {
		writeOpError(w, err)
		return
	}
	writeJSON(w, e)
}

func (a *Agent) handleListDir(w http.ResponseWriter, r *http.Request) {
	p, err := queryPath(r, "path")
	if err != nil {
		writeOpError(w, err)
		return
	}
	depth, err := strconv.Atoi(r.URL.Query().Get("depth"))
	if err != nil || depth < 1 || depth > MaxDirDepth {
		writeOpError(w, fmt.Errorf("depth: want 1 to %d: %w", MaxDirDepth, fs.ErrInvalid))
		return
	}
	out, err := a.listDir(p, depth)
	if err != nil {
		writeOpError(w, err)
		return
	}
	writeJSON(w, out)
}

// listDir lists the directory at p (followed if a symlink) and, below depth 1, its
// subdirectories (never through a symlink), depth levels deep: each directory's entries in
// name order, a directory's entries right after it. More than MaxDirEntries is an error
// wrapping errTooLarge.
func (a *Agent) listDir(p string, depth int) ([]EntryInfo, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("path %s is not a directory: %w", p, syscall.ENOTDIR)
	}
	names := a.loadIDNames()
	out := []EntryInfo{}
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		d, err := os.Open(dir)
		if err != nil {
			if dir != p && (errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist)) {
				return nil // a subdirectory gone or closed meanwhile: listed, not entered
			}
			return err
		}
		// At most one more than the bound: a directory of a million names costs no more.
		ents, err := d.Readdirnames(MaxDirEntries - len(out) + 1)
		d.Close()
		if err != nil && len(ents) == 0 && !errors.Is(err, io.EOF) {
			return err
		}
		if len(out)+len(ents) > MaxDirEntries {
			return fmt.Errorf("path %s: more than %d entries at depth %d; list a subdirectory or a smaller depth: %w",
				p, MaxDirEntries, depth, errTooLarge)
		}
		sort.Strings(ents)
		for _, n := range ents {
			child := filepath.Join(dir, n)
			fi, err := os.Lstat(child)
			if err != nil {
				continue // removed meanwhile
			}
			out = append(out, entryInfo(child, fi, names))
			if fi.IsDir() && level < depth {
				if err := walk(child, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(p, 1); err != nil {
		return nil, err
	}
	return out, nil
}

func (a *Agent) handleMakeDir(w http.ResponseWriter, r *http.Request) {
	p, err := queryPath(r, "path")
	if err != nil {
		writeOpError(w, err)
		return
	}
	// With ?user=NAME the directories are made with that user's credentials (see asUser).
	acc, err := a.queryUser(r)
	if err != nil {
		writeOpError(w, err)
		return
	}
	if err := asUser(acc, func() error { return makeDirs(p) }); err != nil {
		writeOpError(w, err)
		return
	}
	e, err := a.stat(p)
	if err != nil {
		writeOpError(w, err)
		return
	}
	writeJSON(w, e)
}

// makeDirs makes the directory p and its missing parents, mode 0755, owned by whoever the
// calling thread is (see asUser). It returns an error wrapping fs.ErrExist when p exists (whatever it is).
func makeDirs(p string) error {
	if _, err := os.Lstat(p); err == nil {
		return fmt.Errorf("path %s: %w", p, fs.ErrExist)
	}
	return mkdirs(p, true)
}

// ensureDirs makes the directory p and its missing parents as makeDirs does; p may exist.
func ensureDirs(p string) error {
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		return nil
	}
	return mkdirs(p, false)
}

// mkdirs makes each missing component of p; with exclusive, p itself must be new.
func mkdirs(p string, exclusive bool) error {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	cur := "/"
	for i, part := range parts {
		cur = filepath.Join(cur, part)
		err := os.Mkdir(cur, 0o755)
		switch {
		case err == nil:
		case errors.Is(err, fs.ErrExist) && (i < len(parts)-1 || !exclusive):
			// A parent that exists: it must be a directory (or lead to one) for the next Mkdir.
		case errors.Is(err, fs.ErrExist):
			return fmt.Errorf("path %s: %w", p, fs.ErrExist) // made by someone else meanwhile
		default:
			return fmt.Errorf("making %s: %w", cur, err)
		}
	}
	return nil
}

func (a *Agent) handleMove(w http.ResponseWriter, r *http.Request) {
	src, err := queryPath(r, "src")
	if err != nil {
		writeOpError(w, err)
		return
	}
	dst, err := queryPath(r, "dst")
	if err != nil {
		writeOpError(w, err)
		return
	}
	if r.URL.Query().Get("replace") == "1" {
		err = replaceFile(src, dst)
	} else {
		err = move(src, dst)
	}
	if err != nil {
		writeOpError(w, err)
		return
	}
	e, err := a.stat(dst)
	if err != nil {
		writeOpError(w, err)
		return
	}
	writeJSON(w, e)
}

// move renames src to dst, making dst's missing parents. It returns an error wrapping
// fs.ErrNotExist when src is missing and fs.ErrExist when dst exists: a move never replaces.
func move(src, dst string) error {
	if _, err := os.Lstat(src); err != nil {
		return fmt.Errorf("src %s: %w", src, fs.ErrNotExist)
	}
	if src == "/" || dst == "/" || strings.HasPrefix(dst, src+"/") {
		return fmt.Errorf("dst %s: cannot move %s there: %w", dst, src, fs.ErrInvalid)
	}
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("dst %s: %w", dst, fs.ErrExist)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("making the parent of dst %s: %w", dst, err)
	}
	err := unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		err = os.Rename(src, dst) // a kernel without the flag: the Lstat above checked
	}
	switch {
	case errors.Is(err, unix.EEXIST):
		return fmt.Errorf("dst %s: %w", dst, fs.ErrExist)
	case err != nil:
		return fmt.Errorf("moving %s to %s: %w", src, dst, err)
	}
	return nil
}

// replaceFile renames the regular file src over dst, in one step: a reader of dst sees the
// old file or the new, never neither. dst, when it exists, must be a regular file or a
// symlink (replaced, not followed); its directory must exist.
func replaceFile(src, dst string) error {
	if st, err := os.Lstat(src); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("src %s: want a regular file: %w", src, fs.ErrInvalid)
	}
	if st, err := os.Lstat(dst); err == nil && !st.Mode().IsRegular() && st.Mode().Type() != fs.ModeSymlink {
		return fmt.Errorf("dst %s is not a regular file (%s): %w", dst, st.Mode().Type(), fs.ErrInvalid)
	}
	if err := os.Rename(src, dst); err != nil {
		return fmt.Errorf("moving %s over %s: %w", src, dst, err)
	}
	return nil
}

func (a *Agent) handleRemove(w http.ResponseWriter, r *http.Request) {
	p, err := queryPath(r, "path")
	if err != nil {
		writeOpError(w, err)
		return
	}
	if p == "/" {
		writeOpError(w, fmt.Errorf("path /: the sandbox's root cannot be removed: %w", fs.ErrInvalid))
		return
	}
	if _, err := os.Lstat(p); err != nil {
		writeOpError(w, fmt.Errorf("path %s: %w", p, err))
		return
	}
	if err := os.RemoveAll(p); err != nil {
		writeOpError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
