package generation

import (
	"context"
	"os"
	"syscall"
)

// watchDir returns a channel that receives after files are created, written or renamed into
// dir (inotify), or nil when inotify is not available. The watch ends with ctx.
func watchDir(ctx context.Context, dir string) <-chan struct{} {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil
	}
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_CLOSE_WRITE|syscall.IN_MOVED_TO|syscall.IN_CREATE); err != nil {
		syscall.Close(fd)
		return nil
	}
	f := os.NewFile(uintptr(fd), "inotify") // non-blocking: reads wait in the runtime's poller
	ch := make(chan struct{}, 1)
	go func() {
		<-ctx.Done()
		f.Close()
	}()
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := f.Read(buf); err != nil {
				return
			}
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	return ch
}
