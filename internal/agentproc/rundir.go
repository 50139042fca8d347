package agentproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A zygote's run directory (Spec.RunDir: its request files and its
// /run/secrets) is, with Spec.RunTmpfsMiB, a tmpfs of its own that the
// daemon mounts before the sandbox starts and unmounts when it stops: what
// a request reads and writes there, secrets first, never reaches a disk.
// Its scratch/ subdirectory (the sandbox's /tmp and /dev/shm, which outlive
// a request and which any request can fill) is a second tmpfs of the same
// cap mounted inside the first, so that a request that fills /tmp or
// /dev/shm to the last byte or inode leaves the request directories and
// secrets of the next requests their whole tmpfs. Both mounts are nodev,
// nosuid, noexec, mode 0711, capped at RunTmpfsMiB and RunTmpfsMiB*64
// inodes (at least 4096), and noswap where the kernel has it (Linux 6.4 and
// later), so that their pages are not written to swap either (systemd's
// credentials are the model). Unmounting (lazily, MNT_DETACH, which takes
// the inner mount with it) frees everything at once, without the daemon
// walking a tree the sandbox controls.

// tmpfsFlags are the mount flags of a run directory's tmpfs.
const tmpfsFlags = unix.MS_NODEV | unix.MS_NOSUID | unix.MS_NOEXEC

// scratchDir is the run directory's subdirectory holding the sandbox's
// /tmp (scratch/tmp) and /dev/shm (scratch/shm), a tmpfs of its own.
const scratchDir = "scratch"

// mountRunDir mounts the run directory's tmpfs on dir (which exists).
func (z *Process) mountRunDir(dir string) error {
	return z.mountTmpfs("zygo-run", dir)
}

// mountTmpfs mounts a tmpfs capped at RunTmpfsMiB named source on dir
// (which exists). It tries noswap first and, on a kernel that refuses the
// option, mounts without it and says so: the pages may then be swapped out.
func (z *Process) mountTmpfs(source, dir string) error {
	opts := fmt.Sprintf("size=%dm,mode=0711,nr_inodes=%d", z.spec.RunTmpfsMiB, max(4096, z.spec.RunTmpfsMiB*64))
	err := unix.Mount(source, dir, "tmpfs", tmpfsFlags, opts+",noswap")
	if errors.Is(err, unix.EINVAL) {
		z.log.Warn("this kernel has no tmpfs noswap (Linux >= 6.4): run directories, secrets included, may be swapped out")
		err = unix.Mount(source, dir, "tmpfs", tmpfsFlags, opts)
	}
	if err != nil {
		return fmt.Errorf("mounting the %s tmpfs: %w", source, err)
	}
	return nil
}

// removeRunDir unmounts the run directory's tmpfs (if it was mounted) and
// removes the directory. Safe to call more than once.
func (z *Process) removeRunDir() {
	dir := z.spec.RunDir
	if z.spec.RunTmpfsMiB > 0 {
		// Detached, so that a descriptor still open on it cannot keep it
		// mounted; its memory is freed when the last one closes.
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			z.log.Warn("unmounting the run directory", "err", err)
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			z.log.Warn("removing the run directory", "err", err)
		}
		return
	}
	if err := z.removeRunTree(context.Background()); err != nil {
		z.log.Warn("removing the run directory", "err", err)
	}
}

// UnmountStale lazily unmounts every mount at or below root (a state dir's
// run/), left by a daemon that was killed before it could stop its
// zygotes. It returns an error only when /proc/self/mountinfo cannot be
// read or a mount cannot be removed.
func UnmountStale(root string) error {
	mounts, err := MountsBelow(root)
	if err != nil {
		return err
	}
	// Deepest first, so that a mount inside another goes before it.
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := unix.Unmount(mounts[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmounting the stale run directory %s: %w", mounts[i], err)
		}
	}
	return nil
}

// MountsBelow returns the mount points of /proc/self/mountinfo at or below
// root, in the file's order (parents before children).
func MountsBelow(root string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	defer f.Close()
	root = filepath.Clean(root)
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountPath(fields[4])
		if p == root || strings.HasPrefix(p, root+"/") {
			out = append(out, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	return out, nil
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
