package zygote

import (
	"encoding/binary"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// resultWatch tells when a request's result.json appears: the agent writes
// it last, by rename, just before it exits, so the supervisor can answer the
// caller without waiting for the child's exit and reaping (inotify(7),
// IN_MOVED_TO; events fire on the host inode whatever mount wrote it).
type resultWatch struct {
	f     *os.File
	ready chan struct{} // closed when result.json has been renamed into place
}

// watchResult starts watching dir. The caller must Close the watch.
func watchResult(dir string) (*resultWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify_add_watch %s: %w", dir, err)
	}
	w := &resultWatch{f: os.NewFile(uintptr(fd), "inotify"), ready: make(chan struct{})}
	go w.read()
	return w, nil
}

func (w *resultWatch) read() {
	buf := make([]byte, 4096)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12 : off+16]))
			start := off + unix.SizeofInotifyEvent
			end := min(start+nameLen, n)
			name := string(trimNUL(buf[start:end]))
			if name == "result.json" {
				close(w.ready)
				return
			}
			off = end
		}
	}
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

// Close stops the watch.
func (w *resultWatch) Close() { w.f.Close() }
