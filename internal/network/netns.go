package network

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netnsDir is where named namespaces are bind-mounted (as `ip netns` does).
const netnsDir = "/run/netns"

func netnsHandle(f *os.File) netns.NsHandle { return netns.NsHandle(int(f.Fd())) }

// createNetNS makes a new network namespace and bind-mounts it at path. It
// runs on a thread of its own that unshares; if that thread cannot get back
// to the daemon's namespace it is left locked, so the Go runtime ends it
// rather than reuse it. IPv6 is turned off inside.
func createNetNS(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return err
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("unsharing netns: %w", err)
			return
		}
		_ = os.WriteFile("/proc/sys/net/ipv6/conf/all/disable_ipv6", []byte("1"), 0o644)
		_ = os.WriteFile("/proc/sys/net/ipv6/conf/default/disable_ipv6", []byte("1"), 0o644)
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		err = unix.Mount(self, path, "", unix.MS_BIND, "")
		if serr := netns.Set(orig); serr != nil {
			errc <- fmt.Errorf("returning to the host netns: %w", serr) // thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		if err != nil {
			err = fmt.Errorf("bind-mounting netns: %w", err)
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		_ = unix.Unmount(path, unix.MNT_DETACH)
		os.Remove(path)
		return err
	}
	return nil
}

// deleteNetNS unmounts and removes path; a path already gone is not an error.
func deleteNetNS(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
		return fmt.Errorf("unmounting %s: %w", filepath.Base(path), err)
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}
