// Package untrusted is how the daemon touches files in a directory that a
// sandbox can write: request directories, a sandbox's /tmp, run dirs, the
// guest's host dir. The daemon runs as root, so a path a sandbox controls
// must never be allowed to redirect it (a symlink to /etc/shadow), stall it
// (a FIFO renamed onto result.json), or grow it (a huge sparse file).
//
// Every name is resolved relative to a Dir the daemon opened itself, with
// openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS|
// RESOLVE_NO_XDEV): no symlink at any component, no "..", no crossing into
// another mount. Files are opened O_NONBLOCK|O_NOFOLLOW|O_NOCTTY and checked
// with fstat before a byte is read: anything but a regular file with one
// link is refused (ErrNotRegular). Reads are bounded by the caller's maximum
// (errdefs.ErrTooLarge past it). Removal walks by file descriptor and never
// follows a symlink.
//
// The Dir's own path must be one the daemon made and the sandbox cannot
// rename (its parent is not writable by the sandbox uid); OpenDir refuses a
// symlink as its last component but trusts the components above it.
package untrusted

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// ErrNotRegular is returned (wrapped, and wrapping errdefs.ErrFailedPrecondition)
// when a name resolves to something other than a regular file with a single
// link, or a path component is a symlink or another mount.
var ErrNotRegular = fmt.Errorf("%w: not a regular file of the sandbox's own", errdefs.ErrFailedPrecondition)

// resolve is the openat2 resolution every lookup uses.
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// Dir is an open directory whose contents a sandbox may write. It is safe
// for concurrent use. The caller owns it and must Close it.
type Dir struct {
	fd     int         // owned; closed by Close
	closed atomic.Bool // Close ran (a second Close must not close a reused number)
	path   string      // for messages only; never re-resolved
}

// OpenDir opens path, which the daemon created, as a Dir. The last component
// must be a directory, not a symlink. Errors wrap the open's errno
// (os.ErrNotExist when it is missing).
func OpenDir(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return &Dir{fd: fd, path: path}, nil
}

// Path returns the path OpenDir was given (for messages and for binding it
// into a sandbox; never for reading through).
func (d *Dir) Path() string { return d.path }

// live is d's descriptor, or -1 once Close ran, so that a use after Close fails
// (EBADF) instead of reaching whatever file took the number since.
func (d *Dir) live() int {
	if d.closed.Load() {
		return -1
	}
	return d.fd
}

// Chmod sets the mode of the directory d itself to mode, in chmod(2)'s bits
// (0o1733: sticky too), by fchmod on its descriptor (nothing is resolved by
// name), whatever the umask left of a Mkdir's.
func (d *Dir) Chmod(mode uint32) error {
	if err := unix.Fchmod(d.live(), mode); err != nil {
		return &os.PathError{Op: "chmod", Path: d.path, Err: err}
	}
	return nil
}

// Full reports whether the filesystem holding d has no inode or no block
// left for an unprivileged writer (fstatfs on d's descriptor: f_ffree,
// f_bavail): a file the sandbox tried to make there may then have failed
// with ENOSPC. False when fstatfs fails.
func (d *Dir) Full() bool {
	var st unix.Statfs_t
	if unix.Fstatfs(d.live(), &st) != nil {
		return false
	}
	return st.Ffree == 0 || st.Bavail == 0
}

// Close releases the directory's descriptor. Closing again does nothing and
// returns os.ErrClosed.
func (d *Dir) Close() error {
	if !d.closed.CompareAndSwap(false, true) {
		return os.ErrClosed
	}
	return unix.Close(d.fd)
}

// Sub opens the directory name below d, under the same rules, as a Dir of
// its own.
func (d *Dir) Sub(name string) (*Dir, error) {
	fd, err := d.openat(name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	return &Dir{fd: fd, path: filepath.Join(d.path, name)}, nil
}

func (d *Dir) openat(name string, flags int) (int, error) {
	if err := checkName(name); err != nil {
		return -1, err
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK), Resolve: resolve}
	for try := 0; ; try++ {
		fd, err := unix.Openat2(d.live(), name, &how)
		if (err == unix.EINTR || err == unix.EAGAIN) && try < maxRetries {
			continue // EAGAIN: a rename raced the lookup (RESOLVE_BENEATH); retry
		}
		if err != nil {
			return -1, pathErr(d.path, name, err)
		}
		return fd, nil
	}
}

// maxRetries bounds the retries of a lookup that a rename raced: a sandbox
// renaming in a loop must not keep the daemon spinning (the open then fails
// with EAGAIN).
const maxRetries = 64

// pathErr maps openat2's refusals (a symlink, a mount crossing, "..") to
// ErrNotRegular and keeps every other errno as an *os.PathError.
func pathErr(dir, name string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOTDIR) {
		return fmt.Errorf("%s in %s: %w: %w", name, dir, ErrNotRegular, err)
	}
	return &os.PathError{Op: "open", Path: filepath.Join(dir, name), Err: err}
}

func checkName(name string) error {
	if name == "" || filepath.IsAbs(name) || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("%w: name %q", errdefs.ErrInvalidArgument, name)
	}
	return nil
}

// Open opens name below d for reading. It refuses (ErrNotRegular) a symlink
// at any component, anything but a regular file, and a file with more than
// one link (a hard link to a file outside the sandbox's reach). It never
// blocks on a FIFO or device. The caller owns the returned file; it is in
// non-blocking mode, which for a regular file changes nothing.
func (d *Dir) Open(name string) (*os.File, error) {
	fd, _, err := d.openRegular(name)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(d.path, name)), nil
}

// openRegular is Open's checks on a raw descriptor (owned by the caller),
// with the size fstat gave.
func (d *Dir) openRegular(name string) (fd int, size int64, err error) {
	fd, err = d.openat(name, unix.O_RDONLY)
	if err != nil {
		return -1, 0, err
	}
	size, err = checkRegular(fd, filepath.Join(d.path, name))
	if err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	return fd, size, nil
}

// checkRegular checks fd is a regular file with one link and returns its size.
func checkRegular(fd int, path string) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, fmt.Errorf("%s: %w (mode %#o)", path, ErrNotRegular, st.Mode&unix.S_IFMT)
	}
	if st.Nlink != 1 {
		return 0, fmt.Errorf("%s: %w (%d links)", path, ErrNotRegular, st.Nlink)
	}
	return st.Size, nil
}

// ReadFile reads name below d (see Open for what it refuses), at most max
// bytes: a larger file fails with errdefs.ErrTooLarge, and nothing beyond
// max+1 bytes is read, however large the file claims to be. ctx is checked
// before the read (a regular file on a local filesystem does not block).
func (d *Dir) ReadFile(ctx context.Context, name string, max int64) ([]byte, error) {
	b, _, err := d.Head(ctx, name, max+1)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: %s is over %d bytes", errdefs.ErrTooLarge, filepath.Join(d.path, name), max)
	}
	return b, nil
}

// Head reads at most n bytes of name below d (see Open for what it refuses)
// and returns them with the size the file claimed when opened (which may be
// larger than what was read, or smaller when it grew). It reads into one
// buffer of that size (bounded by n), so a file of a few kilobytes costs
// one allocation and one read (a short read of a regular file is its end; a
// file empty when opened is not read), and nothing beyond n bytes is read,
// however large the file claims to be. ctx is checked before the read.
func (d *Dir) Head(ctx context.Context, name string, n int64) (b []byte, size int64, err error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	fd, size, err := d.openRegular(name)
	if err != nil {
		return nil, 0, err
	}
	defer unix.Close(fd)
	b = make([]byte, 0, max(min(size+1, n), 0))
	if size == 0 {
		return b, 0, nil // empty when opened: nothing to read
	}
	for int64(len(b)) < n {
		if len(b) == cap(b) {
			b = slices.Grow(b, int(min(int64(max(cap(b), 512)), n-int64(len(b)))))
		}
		var got int
		got, err = unix.Read(fd, b[len(b):int(min(int64(cap(b)), n))])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || got <= 0 {
			break
		}
		want := int(min(int64(cap(b)), n)) - len(b)
		b = b[:len(b)+got]
		if got < want {
			break // a short read of a regular file is its end: no read to see 0
		}
	}
	if err != nil {
		return nil, 0, &os.PathError{Op: "read", Path: filepath.Join(d.path, name), Err: err}
	}
	return b, size, nil
}

// WriteFile creates name below d, exclusively (an existing name of any
// kind, a symlink included, is an error wrapping os.ErrExist), with mode
// perm, and writes data. On error nothing is left at name.
func (d *Dir) WriteFile(name string, data []byte, perm os.FileMode) error {
	return d.WriteFileAs(name, data, perm, -1, -1)
}

// WriteFileAs is WriteFile of a file owned by uid and gid (-1: the
// daemon's), set through its descriptor before it is closed: four system
// calls (create, write, fchown, close) where WriteFile and Chown made five
// or six. The mode is given at the create; it is set again with fchmod only
// when the daemon's umask would take bits of perm away.
func (d *Dir) WriteFileAs(name string, data []byte, perm os.FileMode, uid, gid int) error {
	if err := checkName(name); err != nil {
		return err
	}
	how := unix.OpenHow{Flags: uint64(unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK),
		Mode: uint64(perm.Perm()), Resolve: resolve}
	var fd int
	var err error
	for try := 0; ; try++ {
		fd, err = unix.Openat2(d.live(), name, &how)
		if (err == unix.EINTR || err == unix.EAGAIN) && try < maxRetries {
			continue // EAGAIN: a rename raced the lookup (RESOLVE_BENEATH); retry
		}
		break
	}
	if err == unix.EEXIST {
		return &os.PathError{Op: "create", Path: filepath.Join(d.path, name), Err: os.ErrExist}
	}
	if err != nil {
		return pathErr(d.path, name, err)
	}
	for rest := data; len(rest) > 0 && err == nil; {
		var n int
		n, err = unix.Write(fd, rest)
		if errors.Is(err, unix.EINTR) {
			err = nil
			continue
		}
		if err == nil && n <= 0 {
			err = io.ErrShortWrite
		}
		rest = rest[max(n, 0):]
	}
	if err == nil && uint32(perm.Perm())&umask() != 0 {
		err = unix.Fchmod(fd, uint32(perm.Perm()))
	}
	if err == nil && (uid >= 0 || gid >= 0) {
		err = unix.Fchown(fd, uid, gid)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		_ = d.Remove(name)
		return fmt.Errorf("writing %s: %w", filepath.Join(d.path, name), err)
	}
	return nil
}

// umask is the daemon's umask, read once from /proc/self/status (reading it
// with umask(2) would change it meanwhile); all bits when it cannot be read,
// so that WriteFileAs always sets the mode itself then.
var umask = sync.OnceValue(func() uint32 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0o777
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return uint32(m)
			}
		}
	}
	return 0o777
})

// Create creates name below d for writing, exclusively and without following
// a symlink (an existing name of any kind, a symlink included, is an error
// wrapping os.ErrExist), with mode perm before the umask. The caller owns the
// returned file.
func (d *Dir) Create(name string, perm os.FileMode) (*os.File, error) {
	how := unix.OpenHow{Flags: uint64(unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NOCTTY),
		Mode: uint64(perm.Perm()), Resolve: resolve}
	if err := checkName(name); err != nil {
		return nil, err
	}
	fd, err := unix.Openat2(d.live(), name, &how)
	if err == unix.EEXIST {
		return nil, &os.PathError{Op: "create", Path: filepath.Join(d.path, name), Err: os.ErrExist}
	}
	if err != nil {
		return nil, pathErr(d.path, name, err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(d.path, name)), nil
}

// Chown changes the owner of name below d without following a symlink.
func (d *Dir) Chown(name string, uid, gid int) error {
	if err := checkName(name); err != nil {
		return err
	}
	if strings.ContainsRune(name, '/') {
		sub, err := d.Sub(filepath.Dir(name))
		if err != nil {
			return err
		}
		defer sub.Close()
		return sub.Chown(filepath.Base(name), uid, gid)
	}
	if err := unix.Fchownat(d.live(), name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "chown", Path: filepath.Join(d.path, name), Err: err}
	}
	return nil
}

// Remove removes the single entry name (a file of any kind, a symlink
// itself, or an empty directory) directly in d. A missing name is not an
// error.
func (d *Dir) Remove(name string) error {
	if err := checkName(name); err != nil || strings.ContainsRune(name, '/') {
		return fmt.Errorf("%w: name %q", errdefs.ErrInvalidArgument, name)
	}
	err := unix.Unlinkat(d.live(), name, 0)
	if err == unix.EISDIR || err == unix.EPERM {
		err = unix.Unlinkat(d.live(), name, unix.AT_REMOVEDIR)
	}
	if err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "remove", Path: filepath.Join(d.path, name), Err: err}
	}
	return nil
}

// RemoveAll removes name directly in d and, if it is a directory, all it
// holds, walking by file descriptor: a symlink is removed, never followed,
// and no component is re-resolved by path. ctx bounds the walk (a sandbox
// could have made millions of entries). A missing name is not an error.
func (d *Dir) RemoveAll(ctx context.Context, name string) error {
	if err := checkName(name); err != nil || strings.ContainsRune(name, '/') {
		return fmt.Errorf("%w: name %q", errdefs.ErrInvalidArgument, name)
	}
	return removeAllAt(ctx, d.live(), name, d.path, 0, unix.DT_UNKNOWN)
}

// RemoveSub is RemoveAll of the directory name directly in d, walked through
// sub, the Dir that d.Sub(name) returned (which saves opening it again; the
// sandbox cannot rename name, since d is the daemon's). sub is closed, and
// must not be in use by anything else meanwhile.
func (d *Dir) RemoveSub(ctx context.Context, name string, sub *Dir) error {
	defer sub.Close()
	if err := checkName(name); err != nil || strings.ContainsRune(name, '/') {
		return fmt.Errorf("%w: name %q", errdefs.ErrInvalidArgument, name)
	}
	return removeDirAt(ctx, d.live(), name, sub.live(), filepath.Join(d.path, name), 0)
}

// maxDepth bounds RemoveAll's recursion (each level holds one descriptor).
const maxDepth = 512

// maxPasses bounds the listings of one directory that RemoveAll makes while
// something keeps adding entries to it.
const maxPasses = 64

// removeAllAt removes name in the directory open at parent. typ is the type
// getdents gave for it (a hint: the sandbox may have replaced the entry
// since): a directory is first removed as an empty one (a request's tmp/
// usually is), anything else first unlinked, and the other is tried when
// the kernel says the entry is of the other kind.
func removeAllAt(ctx context.Context, parent int, name, where string, depth int, typ uint8) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if typ == unix.DT_DIR {
		switch err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR); err {
		case nil, unix.ENOENT:
			return nil
		case unix.ENOTEMPTY, unix.EEXIST:
		case unix.ENOTDIR:
			return removeAllAt(ctx, parent, name, where, depth, unix.DT_UNKNOWN)
		default:
			return &os.PathError{Op: "remove", Path: filepath.Join(where, name), Err: err}
		}
	} else {
		err := unix.Unlinkat(parent, name, 0)
		if err == nil || err == unix.ENOENT {
			return nil
		}
		if err != unix.EISDIR && err != unix.EPERM {
			return &os.PathError{Op: "remove", Path: filepath.Join(where, name), Err: err}
		}
	}
	if depth >= maxDepth {
		return fmt.Errorf("removing %s: deeper than %d levels", filepath.Join(where, name), maxDepth)
	}
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: filepath.Join(where, name), Err: err}
	}
	defer unix.Close(fd)
	return removeDirAt(ctx, parent, name, fd, filepath.Join(where, name), depth)
}

// direntMax is the largest linux_dirent64 getdents64(2) returns: 19 bytes of
// header, a name of up to 255 bytes and its NUL, rounded up to 8.
const direntMax = 280

// removeDirAt removes every entry of the directory open at fd (name in
// parent), then the directory itself. One listing usually does: entries are
// removed as getdents returns them; when the final rmdir finds the
// directory not empty (an entry skipped while the listing changed, or one
// added meanwhile), it lists again from the top, at most maxPasses times.
// The first pass takes a getdents that left room for another entry as the
// end of the listing (a request directory's few entries come in one call,
// and the call that would return none is saved); the final rmdir checks it,
// and the passes after read to the end.
func removeDirAt(ctx context.Context, parent int, name string, fd int, path string, depth int) error {
	buf := make([]byte, 8<<10)
	for pass := 0; ; pass++ {
		if pass > 0 {
			if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
				return &os.PathError{Op: "seek", Path: path, Err: err}
			}
		}
		for {
			n, err := unix.Getdents(fd, buf)
			if err == unix.EINTR {
				continue
			}
			if err == unix.ENOENT {
				return nil // removed already (getdents of a deleted directory)
			}
			if err != nil || n <= 0 {
				break // the rmdir below says whether anything is left
			}
			for off := 0; off < n; {
				ent, typ, next := dirent(buf[:n], off)
				if next <= off {
					return fmt.Errorf("readdir %s: malformed entry", path)
				}
				off = next
				if ent == "" || ent == "." || ent == ".." {
					continue
				}
				if err := removeAllAt(ctx, fd, ent, path, depth+1, typ); err != nil {
					return err
				}
			}
			if pass == 0 && n <= len(buf)-direntMax {
				break // it would have fitted one more entry: very likely the end
			}
		}
		err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR)
		switch {
		case err == nil || err == unix.ENOENT:
			return nil
		case (err == unix.ENOTEMPTY || err == unix.EEXIST) && pass+1 < maxPasses:
			if err := ctx.Err(); err != nil {
				return err
			}
			continue
		}
		return &os.PathError{Op: "remove", Path: path, Err: err}
	}
}

// dirent parses the linux_dirent64 at off in buf (getdents64(2)): its name,
// its d_type and the offset of the next one (not past off when malformed).
func dirent(buf []byte, off int) (name string, typ uint8, next int) {
	const nameOff = 19 // d_ino 8, d_off 8, d_reclen 2, d_type 1
	if off+nameOff > len(buf) {
		return "", 0, off
	}
	reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
	if reclen < nameOff || off+reclen > len(buf) {
		return "", 0, off
	}
	b := buf[off+nameOff : off+reclen]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b), buf[off+18], off + reclen
}

// Mkdir creates the directory name directly in d with mode perm (before the
// umask). An existing name of any kind is an error wrapping os.ErrExist.
func (d *Dir) Mkdir(name string, perm os.FileMode) error {
	if err := checkName(name); err != nil || strings.ContainsRune(name, '/') {
		return fmt.Errorf("%w: name %q", errdefs.ErrInvalidArgument, name)
	}
	if err := unix.Mkdirat(d.live(), name, uint32(perm.Perm())); err != nil {
		if err == unix.EEXIST {
			err = os.ErrExist
		}
		return &os.PathError{Op: "mkdir", Path: filepath.Join(d.path, name), Err: err}
	}
	return nil
}

// Rename renames oldName to newName, both directly in d, replacing what is
// at newName (a symlink there is replaced, never followed; a directory there
// is an error).
func (d *Dir) Rename(oldName, newName string) error {
	for _, n := range []string{oldName, newName} {
		if err := checkName(n); err != nil || strings.ContainsRune(n, '/') {
			return fmt.Errorf("%w: name %q", errdefs.ErrInvalidArgument, n)
		}
	}
	fd := d.live()
	if err := unix.Renameat(fd, oldName, fd, newName); err != nil {
		return &os.PathError{Op: "rename", Path: filepath.Join(d.path, newName), Err: err}
	}
	return nil
}

// Names returns the names of the entries directly in d, at most max of them
// (errdefs.ErrTooLarge past it), read through a fresh descriptor of d.
func (d *Dir) Names(max int) ([]string, error) {
	fd, err := d.openat(".", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	names, err := f.Readdirnames(max + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("listing %s: %w", d.path, err)
	}
	if len(names) > max {
		return nil, fmt.Errorf("%w: %s holds more than %d entries", errdefs.ErrTooLarge, d.path, max)
	}
	return names, nil
}
