package guest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// dialBlocking connects to the unix socket at path and returns a connection that does
// blocking reads and writes on its own thread instead of going through the netpoller.
//
// Why: after a gVisor checkpoint (--leave-running or restore), a socket connected to a host
// listener is dead, and a blocking read on it returns EOF at once, but epoll is not told, so a
// netpoller read waits forever (measured: the agent only noticed after the HTTP/2 ping timeout,
// 10 s). A blocking read returns and the agent dials again within milliseconds.
func dialBlocking(path string) (net.Conn, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("making socket: %w", err)
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("connecting to %s: %w", path, err)
	}
	// fd is blocking, so os.NewFile does not register it with the netpoller.
	return &blockingConn{fd: fd, f: os.NewFile(uintptr(fd), path), path: path}, nil
}

// blockingConn is a net.Conn over a blocking socket. Deadlines are not supported (the
// agent's HTTP/2 server sets none); Close shuts the socket down first, which wakes a read
// blocked in another thread.
type blockingConn struct {
	fd   int
	f    *os.File
	path string
	once sync.Once
}

func (c *blockingConn) Read(b []byte) (int, error) {
	n, err := c.f.Read(b)
	if n == 0 && err == nil {
		err = errors.New("zero-length read")
	}
	return n, err
}

func (c *blockingConn) Write(b []byte) (int, error) { return c.f.Write(b) }

func (c *blockingConn) Close() error {
	var err error
	c.once.Do(func() {
		_ = unix.Shutdown(c.fd, unix.SHUT_RDWR)
		err = c.f.Close()
	})
	return err
}

func (c *blockingConn) LocalAddr() net.Addr                { return &net.UnixAddr{Name: "", Net: "unix"} }
func (c *blockingConn) RemoteAddr() net.Addr               { return &net.UnixAddr{Name: c.path, Net: "unix"} }
func (c *blockingConn) SetDeadline(t time.Time) error      { return nil }
func (c *blockingConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *blockingConn) SetWriteDeadline(t time.Time) error { return nil }
