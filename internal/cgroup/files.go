package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// A pooled group serves request after request, and each request reads and writes the same
// few control files (cpuacct.usage, pids.current, memory.failcnt, cgroup.procs, ...). Opening
// a file, reading it and closing it is several system calls, each slow on a nested VM: an
// eighth of the daemon's CPU per request went there (issue 15's profile). A pooled group
// therefore opens each file once, on first use, and keeps the descriptor until Delete (or
// Cleanup drops it): at most 14 descriptors a group, for at most maxFree kept groups and
// those in use. A read is one pread(2) at offset 0, which makes a cgroup file (a seq_file)
// produce its current content again, and a write one pwrite(2). A group from Place alone
// (the sandbox's own) opens, reads and closes each time, as before: it is read rarely and
// must hold no descriptors between.

// ctlFile names one control file of a group: the controller whose hierarchy holds it, its
// name, and whether it is opened for writing (cgroupfs refuses O_RDWR on files without a
// write handler, so readers and writers are separate descriptors).
type ctlFile struct {
	ctrl, name string
	write      bool
}

// ctlFiles are a pooled group's open control files. The descriptors are owned by it and
// closed by closeFiles; after that every access opens, uses and closes the file by path.
type ctlFiles struct {
	mu     sync.Mutex
	fds    map[ctlFile]int
	closed bool
}

// maxCtlRead bounds one read of a control file: the largest read here (v2 cpu.stat,
// memory.oom_control) is a few hundred bytes.
const maxCtlRead = 1024

// with runs op on a descriptor of f: the one g keeps (opened on first use), or, for a
// group that keeps none or whose descriptors Delete closed, one opened for op and closed
// after it. op runs under the files' lock, so Delete cannot close the descriptor under it.
// Errors are *fs.PathError wrapping the errno (fs.ErrNotExist for a group that is gone).
func (g *Group) with(f ctlFile, op func(fd int) error) error {
	flags := unix.O_RDONLY | unix.O_CLOEXEC
	if f.write {
		flags = unix.O_WRONLY | unix.O_CLOEXEC
	}
	c := g.files
	if c != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		if fd, ok := c.fds[f]; ok && !c.closed {
			return g.pathErr(f, op(fd))
		}
	}
	dir := g.dir(f.ctrl)
	if dir == "" {
		return &fs.PathError{Op: "open", Path: f.name, Err: fs.ErrNotExist}
	}
	fd, err := unix.Open(filepath.Join(dir, f.name), flags, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: filepath.Join(dir, f.name), Err: err}
	}
	if c == nil || c.closed {
		defer unix.Close(fd)
	} else {
		if c.fds == nil {
			c.fds = map[ctlFile]int{}
		}
		c.fds[f] = fd
	}
	return g.pathErr(f, op(fd))
}

// pathErr names f in err, an errno of a read or write (nil stays nil). ENODEV, what a
// descriptor kept open on a control file returns once its group was removed, becomes
// ENOENT, what opening it by path would have said.
func (g *Group) pathErr(f ctlFile, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.ENODEV) {
		err = unix.ENOENT
	}
	op := "read"
	if f.write {
		op = "write"
	}
	return &fs.PathError{Op: op, Path: filepath.Join(g.dir(f.ctrl), f.name), Err: err}
}

// closeFiles closes the descriptors g keeps (Delete, before the directories go).
func (g *Group) closeFiles() {
	c := g.files
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, fd := range c.fds {
		unix.Close(fd)
	}
	c.fds, c.closed = nil, true
}

// read reads f whole (at most maxCtlRead bytes) into buf and returns it.
func (g *Group) read(f ctlFile, buf *[maxCtlRead]byte) ([]byte, error) {
	var n int
	err := g.with(f, func(fd int) (err error) {
		n, err = preadRetry(fd, buf[:])
		return err
	})
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// write writes s to f (one write: a control file takes its value whole).
func (g *Group) write(f ctlFile, s []byte) error {
	f.write = true
	return g.with(f, func(fd int) error {
		for {
			_, err := unix.Pwrite(fd, s, 0)
			if !errors.Is(err, unix.EINTR) {
				return err
			}
		}
	})
}

func preadRetry(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Pread(fd, b, 0)
		if !errors.Is(err, unix.EINTR) {
			return n, err
		}
	}
}

// readUintFile reads a control file holding one unsigned number.
func (g *Group) readUintFile(ctrl, name string) (uint64, error) {
	var buf [maxCtlRead]byte
	b, err := g.read(ctlFile{ctrl: ctrl, name: name}, &buf)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parsing %s: %w", name, err)
	}
	return v, nil
}

// readCounter reads the value of key in a flat-keyed control file ("key value" lines, as
// ReadCounters); a key that is not there is 0.
func (g *Group) readCounter(ctrl, name, key string) (uint64, error) {
	vs, err := g.readCounterList(ctrl, name, key)
	return vs[0], err
}

// readCounterList reads the values of keys (at most 3) in one read of a flat-keyed control
// file, in the order given; a key that is not there is 0.
func (g *Group) readCounterList(ctrl, name string, keys ...string) ([3]uint64, error) {
	var out [3]uint64
	var buf [maxCtlRead]byte
	b, err := g.read(ctlFile{ctrl: ctrl, name: name}, &buf)
	if err != nil {
		return out, err
	}
	eachCounter(b, func(k []byte, v uint64) {
		for i, key := range keys {
			if i < len(out) && string(k) == key {
				out[i] = v
			}
		}
	})
	return out, nil
}

// writeZeroFile writes "0" to a control file (a v1 counter reset).
func (g *Group) writeZeroFile(ctrl, name string) error {
	return g.write(ctlFile{ctrl: ctrl, name: name}, []byte("0"))
}

// hostCPUs is the number of CPUs the host has online (/sys/devices/system/cpu/online, read
// once), at least the daemon's own count (runtime.NumCPU, its affinity): a request's
// processes may set an affinity wider than the daemon's, never use more CPUs than are online.
var hostCPUs = sync.OnceValue(func() int {
	n := runtime.NumCPU()
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return max(n, 1)
	}
	online := 0
	for _, r := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		a, err1 := strconv.Atoi(lo)
		z := a
		var err2 error
		if isRange {
			z, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || z < a {
			return max(n, 1)
		}
		online += z - a + 1
	}
	return max(n, online, 1)
})
