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
	"syscall"
)

// cleanPath returns the cleaned absolute path in the query, or "" when it is missing or
// relative.
func cleanPath(r *http.Request) string {
	p := r.URL.Query().Get("path")
	if p == "" || !filepath.IsAbs(p) {
		return ""
	}
	return filepath.Clean(p)
}

func writeFSError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		// Permanent for this path (a read-only bind, a mode): not worth a retry.
		writeError(w, http.StatusForbidden, "permission_denied", err.Error())
	case errors.Is(err, syscall.EBUSY), errors.Is(err, syscall.ETXTBSY):
		// The path is in use by the sandbox itself (a mount point such as /zygo/guest, a
		// running binary): the caller's conflict, not the guest failing.
		writeError(w, http.StatusConflict, "conflict", err.Error())
	case errors.Is(err, fs.ErrInvalid), errors.Is(err, fs.ErrExist),
		errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR):
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
	default:
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
	}
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorBody{Error: msg, Code: code})
}

func (a *Agent) handleGetFile(w http.ResponseWriter, r *http.Request) {
	p := cleanPath(r)
	if p == "" {
		writeError(w, http.StatusBadRequest, "invalid", "path must be absolute")
		return
	}
	// With ?user=NAME the file is opened with that user's credentials: what the user may not
	// read is refused by the kernel (E2B reads files as its user).
	acc, err := a.queryUser(r)
	if err != nil {
		writeOpError(w, err)
		return
	}
	// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever. It
	// changes nothing for the regular files served below.
	var f *os.File
	err = asUser(acc, func() (err error) {
		f, err = os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		return err
	})
	if err != nil {
		writeFSError(w, err)
		return
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		writeError(w, http.StatusBadRequest, "invalid", p+" is a directory")
		return
	} else if err == nil && !st.Mode().IsRegular() {
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("%s is not a regular file (%s)", p, st.Mode().Type()))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = io.Copy(w, f)
}

// handlePutFile writes the body to a temporary file beside the target and renames it, so a
// reader never sees half a file.
func (a *Agent) handlePutFile(w http.ResponseWriter, r *http.Request) {
	p := cleanPath(r)
	mode, err := strconv.ParseUint(r.URL.Query().Get("mode"), 8, 32)
	if p == "" || err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "need an absolute path and an octal mode")
		return
	}
	// The rename below replaces whatever is at p: never a device (a put to /dev/null made it
	// a regular file for every later process), a FIFO, a socket or a directory.
	if st, err := os.Lstat(p); err == nil && !st.Mode().IsRegular() && st.Mode().Type() != fs.ModeSymlink {
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("%s is not a regular file (%s); put writes files", p, st.Mode().Type()))
		return
	}
	// With ?user=NAME the parents the put makes, the file and the rename are made with that
	// user's credentials, so they belong to the user and what the user may not write is
	// refused by the kernel (E2B writes files as its user); else as root.
	owner, err := a.queryUser(r)
	if err != nil {
		writeOpError(w, err)
		return
	}
	err = asUser(owner, func() error {
		if err := ensureDirs(filepath.Dir(p)); err != nil {
			return err
		}
		return writeFileAtomic(p, r.Body, fs.FileMode(mode)&fs.ModePerm)
	})
	if err != nil {
		writeFSError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// writeFileAtomic writes r to a temporary file beside p, with perm, then renames it to p.
// The file belongs to whoever the calling thread is (see asUser).
func writeFileAtomic(p string, r io.Reader, perm fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(p), ".zygo-put-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // name the file asked for, not the temporary one
		}
		return &fs.PathError{Op: "writing", Path: p, Err: err}
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

func (a *Agent) handleListFiles(w http.ResponseWriter, r *http.Request) {
	p := cleanPath(r)
	if p == "" {
		writeError(w, http.StatusBadRequest, "invalid", "path must be absolute")
		return
	}
	st, err := os.Lstat(p)
	if err != nil {
		writeFSError(w, err)
		return
	}
	out := Listing{Entries: []FileInfo{}}
	if !st.IsDir() {
		out.Entries, out.Total = append(out.Entries, fileInfo(st)), 1
	} else {
		// Names only first: a directory the sandbox filled with 400k entries costs names,
		// not 400k Lstats, and the answer is bounded.
		d, err := os.Open(p)
		if err != nil {
			writeFSError(w, err)
			return
		}
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil {
			writeFSError(w, err)
			return
		}
		sort.Strings(names)
		out.Total = len(names)
		for _, n := range names[:min(len(names), MaxListEntries)] {
			if fi, err := os.Lstat(filepath.Join(p, n)); err == nil {
				out.Entries = append(out.Entries, fileInfo(fi))
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func fileInfo(fi fs.FileInfo) FileInfo {
	return FileInfo{Name: fi.Name(), Size: fi.Size(), Mode: uint32(fi.Mode()), ModTime: fi.ModTime(), IsDir: fi.IsDir()}
}
