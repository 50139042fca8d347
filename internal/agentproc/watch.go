package agentproc

import (
	"encoding/binary"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// resultWatcher tells when a request's result.json appears: the agent
// writes it last, by rename, just before it exits, so the supervisor can
// answer the caller without waiting for the child's exit and reaping
// (inotify(7), IN_MOVED_TO; events fire on the host inode whatever mount
// wrote it). One inotify instance serves a whole zygote — instances are a
// per-user limit (fs.inotify.max_user_instances, often 128), watches are
// not scarce — and when inotify is unavailable requests simply wait for
// the child's exit.
type resultWatcher struct {
	f *os.File // nil when inotify is unavailable

	mu    sync.Mutex // guards waits
	waits map[int32]chan struct{}
}

func newResultWatcher() *resultWatcher {
	w := &resultWatcher{waits: map[int32]chan struct{}{}}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return w
	}
	w.f = os.NewFile(uintptr(fd), "inotify")
	go w.read()
	return w
}

// resultWatch is one directory's watch.
type resultWatch struct {
	w     *resultWatcher
	wd    int32
	ready chan struct{} // closed when result.json is in place; nil: no early answer
}

// watch starts watching dir, a request directory. It never fails: without
// inotify, ready is nil and the caller waits for the exit instead. Every
// component of dir is the daemon's (the sandbox cannot rename the request
// directory itself); IN_DONT_FOLLOW|IN_ONLYDIR still refuse a symlink there.
// The watch is one-shot (IN_ONESHOT): the kernel removes it at its first
// event and queues IN_IGNORED with it, so the reader wakes once per request;
// a watch left until the directory's removal woke the reader a second time
// for that IN_IGNORED. A first rename onto another name ends the watch
// without an answer: the request then waits for the child's exit, as
// without inotify.
// The event only says that some name was renamed onto result.json: a FIFO,
// a directory or a symlink renamed there wakes the request too, and
// readResult refuses it (untrusted.Dir), so the event is a hint, never
// trusted content.
func (w *resultWatcher) watch(dir string) *resultWatch {
	if w.f == nil {
		return &resultWatch{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	wd, err := unix.InotifyAddWatch(int(w.f.Fd()), dir, unix.IN_MOVED_TO|unix.IN_DONT_FOLLOW|unix.IN_ONLYDIR|unix.IN_ONESHOT)
	if err != nil {
		return &resultWatch{}
	}
	ch := make(chan struct{})
	w.waits[int32(wd)] = ch
	return &resultWatch{w: w, wd: int32(wd), ready: ch}
}

// Close stops the watch (idempotent).
func (r *resultWatch) Close() {
	if r.w == nil {
		return
	}
	r.w.mu.Lock()
	if _, ok := r.w.waits[r.wd]; ok {
		delete(r.w.waits, r.wd)
		_, _ = unix.InotifyRmWatch(int(r.w.f.Fd()), uint32(r.wd))
	}
	r.w.mu.Unlock()
	r.w = nil
}

func (w *resultWatcher) read() {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off : off+4]))
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12 : off+16]))
			start := off + unix.SizeofInotifyEvent
			end := min(start+nameLen, n)
			if string(trimNUL(buf[start:end])) == "result.json" {
				w.mu.Lock()
				if ch, ok := w.waits[wd]; ok {
					close(ch)
					delete(w.waits, wd)
				}
				w.mu.Unlock()
			}
			off = end
		}
	}
}

// close releases the inotify instance.
func (w *resultWatcher) close() {
	if w != nil && w.f != nil {
		w.f.Close()
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
