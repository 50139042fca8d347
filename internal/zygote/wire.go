package zygote

import (
	"encoding/json"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// maxDatagram is the largest protocol message, bytes (docs/protocol.md).
const maxDatagram = 64 << 10

// message is the union of the protocol's JSON messages; Type selects which
// fields are meaningful.
type message struct {
	Type string `json:"type"`
	Seq  int    `json:"seq,omitempty"`
	PID  int    `json:"pid,omitempty"`

	// exited
	Code   *int `json:"code,omitempty"`
	Signal int  `json:"signal,omitempty"`

	// ready
	Python   string  `json:"python,omitempty"`
	OpenSSL  string  `json:"openssl,omitempty"`
	ForkSafe *bool   `json:"fork_safe,omitempty"`
	Checks   []Check `json:"checks,omitempty"`

	// import_error, fork_error
	Error json.RawMessage `json:"error,omitempty"`

	// go
	RequestID  string `json:"request_id,omitempty"`
	Dir        string `json:"dir,omitempty"`
	DeadlineMs int64  `json:"deadline_ms,omitempty"`
	Function   string `json:"function,omitempty"`
	Version    string `json:"version,omitempty"`
	Strict     bool   `json:"strict,omitempty"`
}

// Check is one warm-up finding the agent reports in its ready message.
type Check struct {
	Name   string `json:"name"`
	Level  string `json:"level"` // "info" or "warn"
	Detail string `json:"detail"`
}

// seqpacketPair returns a connected AF_UNIX SOCK_SEQPACKET pair, both
// close-on-exec. The caller owns both ends.
func seqpacketPair() (local *net.UnixConn, remote *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("creating socket pair: %w", err)
	}
	lf := os.NewFile(uintptr(fds[0]), "zygo-local")
	remote = os.NewFile(uintptr(fds[1]), "zygo-remote")
	c, err := net.FileConn(lf)
	lf.Close()
	if err != nil {
		remote.Close()
		return nil, nil, fmt.Errorf("wrapping socket: %w", err)
	}
	return c.(*net.UnixConn), remote, nil
}

// send writes one message, with f's descriptor attached as SCM_RIGHTS when
// f is not nil. The caller keeps ownership of f.
func send(c *net.UnixConn, m message, f *os.File) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var oob []byte
	if f != nil {
		oob = unix.UnixRights(int(f.Fd()))
	}
	if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("sending %s: %w", m.Type, err)
	}
	return nil
}

// recv reads one message. If the sender attached credentials (or the socket
// has SO_PASSCRED), creds holds them with the pid translated into our pid
// namespace by the kernel (unix(7), SCM_CREDENTIALS).
func recv(c *net.UnixConn) (m message, creds *unix.Ucred, err error) {
	buf := make([]byte, maxDatagram)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred)+unix.CmsgSpace(4*8))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return m, nil, err
	}
	if n == 0 {
		return m, nil, fmt.Errorf("peer closed the socket")
	}
	if flags&unix.MSG_TRUNC != 0 {
		return m, nil, fmt.Errorf("message larger than %d bytes", maxDatagram)
	}
	if oobn > 0 {
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, cm := range msgs {
			if cm.Header.Level == unix.SOL_SOCKET && cm.Header.Type == unix.SCM_CREDENTIALS {
				if uc, err := unix.ParseUnixCredentials(&cm); err == nil {
					creds = uc
				}
			}
			if cm.Header.Level == unix.SOL_SOCKET && cm.Header.Type == unix.SCM_RIGHTS {
				// We never expect descriptors from an agent; close any we get.
				if fds, err := unix.ParseUnixRights(&cm); err == nil {
					for _, fd := range fds {
						unix.Close(fd)
					}
				}
			}
		}
	}
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		return m, creds, fmt.Errorf("malformed message: %w", err)
	}
	return m, creds, nil
}

// setPassCred turns on SO_PASSCRED so that the kernel attaches the sender's
// credentials to every message we receive.
func setPassCred(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	})
	if err != nil {
		return err
	}
	return serr
}
