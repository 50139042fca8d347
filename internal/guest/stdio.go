package guest

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Where output of the sandbox's processes goes. PID 1's own stdout and stderr are a host file
// (the instance's runsc.log), so no other process may hold them: the interpreter's fds 1 and 2
// and every service's are pipes the agent reads (docs/sandboxes.md, "Output and the host's
// disk").
const (
	// MaxAgentLogBytes bounds what zygo-guest writes to its stderr over its whole life, in
	// bytes (CappedWriter): that stderr is the host file runsc.log.
	MaxAgentLogBytes = 8 << 20
	// ServiceLogDir is the directory, inside the sandbox, of the services' logs: NAME.log
	// holds a service's stdout and stderr, NAME.log.1 the part before the last rotation. It is
	// in the sandbox's root, so in its memory overlay and in every checkpoint.
	ServiceLogDir = "/var/log/zygo"
	// MaxServiceLogBytes bounds one service log file, in bytes. A full NAME.log moves to
	// NAME.log.1 (replacing it) and a new NAME.log begins (a write is split at the bound), so
	// a service keeps at most twice this in the sandbox.
	MaxServiceLogBytes = 1 << 20
)

// CappedWriter passes writes on to an io.Writer until a total number of bytes is reached;
// then it writes one line saying that further output is dropped, and drops every later write
// (reporting it written, so a logger never fails). A write is passed whole or not at all, so a
// log line is never cut. Safe for concurrent use.
type CappedWriter struct {
	mu      sync.Mutex // guards w, left, dropped
	w       io.Writer
	left    int64
	dropped bool
}

// NewCappedWriter returns a writer that passes at most maxBytes bytes to w over its life, then
// one notice line of its own. It does not own w.
func NewCappedWriter(w io.Writer, maxBytes int64) *CappedWriter {
	return &CappedWriter{w: w, left: maxBytes}
}

// Write passes p on if it fits in what is left; it returns len(p) and nil when p is dropped.
func (c *CappedWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dropped {
		return len(p), nil
	}
	if int64(len(p)) > c.left {
		c.dropped = true
		fmt.Fprintf(c.w, "zygo-guest: this log reached its bound; further log lines are dropped\n")
		return len(p), nil
	}
	n, err := c.w.Write(p)
	c.left -= int64(n)
	return n, err
}

// serviceLog is one service's log file: the agent writes there what the service's processes
// send to their stdout and stderr (one pipe for both, so their order is kept). The file is
// never longer than max: once full it is rotated (NAME.log → NAME.log.1, replacing the older
// one) and the write goes on in a new NAME.log. The agent writes only through a file it opened itself, without
// following a symlink and only if it is a regular file, so code that replaces the log with a
// symlink or a FIFO loses its output instead of redirecting the agent's writes. Safe for
// concurrent use: a service's restarted process and a child of the previous one may both
// still write.
type serviceLog struct {
	path string // on this machine (under Config.Root)
	max  int64
	log  *slog.Logger

	mu     sync.Mutex // guards the fields below
	f      *os.File   // the open NAME.log, or nil
	size   int64      // bytes in f
	warned bool       // a failure to open was logged
}

func newServiceLog(path string, max int64, log *slog.Logger) *serviceLog {
	return &serviceLog{path: path, max: max, log: log}
}

// Write appends p to the log, rotating it as needed. It never fails: what cannot be written
// (no regular file could be opened) is dropped, so a service never blocks on its log.
func (l *serviceLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		if l.f == nil || l.size >= l.max {
			if !l.reopenLocked() || l.size >= l.max {
				break
			}
		}
		w, err := l.f.Write(p[:min(int64(len(p)), l.max-l.size)])
		l.size += int64(w)
		p = p[w:]
		if err != nil {
			l.f.Close()
			l.f = nil
			break
		}
	}
	return n, nil
}

// reopenLocked closes the current file and opens NAME.log, first moving it to NAME.log.1 when
// it is full. It returns false when no file could be opened.
func (l *serviceLog) reopenLocked() bool {
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
	f, size, err := openLogFile(l.path)
	if err == nil && size >= l.max {
		f.Close()
		if os.Rename(l.path, l.path+".1") != nil {
			_ = os.Remove(l.path)
		}
		f, size, err = openLogFile(l.path)
	}
	if err != nil {
		if !l.warned {
			l.warned = true
			l.log.Warn("service output is dropped: cannot open its log", "path", l.path, "err", err)
		}
		return false
	}
	l.f, l.size = f, size
	return true
}

// openLogFile opens path for appending, creating it and its directory (0755) as needed. It
// refuses a symlink, a FIFO or anything else but a regular file.
func openLogFile(path string) (*os.File, int64, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, 0, err
	}
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o640)
	if err != nil {
		return nil, 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("%s is not a regular file", path)
	}
	_ = unix.SetNonblock(fd, false) // O_NONBLOCK was only for a FIFO planted there
	return os.NewFile(uintptr(fd), path), st.Size, nil
}

// copyToLog copies r (the read end of a service's output pipe, owned and closed here) to l
// until every writer has closed the pipe.
func copyToLog(r *os.File, l *serviceLog) {
	defer r.Close()
	_, _ = io.Copy(l, r)
}
