package agentproc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

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
	// Script is a pool request's script (Request.Script); absent for functions.
	Script *goScript `json:"script,omitempty"`
	// EventBytes is the length of the event carried inline (Event); absent: the event
	// is the request directory's event.json.
	EventBytes int `json:"event_bytes,omitempty"`
	// Event is a go message's inline event (inlineEvent): send writes it after the JSON
	// object and one newline, in the same datagram. Never part of the JSON.
	Event []byte `json:"-"`
}

// maxInlineEvent is the largest event a go message carries in its datagram (bytes),
// instead of the request directory's event.json: with the go message's JSON (under 1 KiB:
// the request id, the directory, the function and its version, all the daemon's) it stays
// well within maxDatagram, the most the Python agent receives (wire.MAX_DATAGRAM), and
// within a SOCK_SEQPACKET datagram's limit (the socket's send buffer, 208 KiB by default).
// The file it spares is five of the daemon's system calls a request (its create, write,
// fchown, close and removal) and four of the child's.
const maxInlineEvent = 32 << 10

// goScript is the "script" member of a pool request's go message
// (docs/protocol.md, "Pool requests").
type goScript struct {
	Tenant string `json:"tenant"`
	Hash   string `json:"hash"`
	Entry  string `json:"entry"`
	// Mounted says the descriptor attached to go is a read-only mount of
	// the script's directory; otherwise the files are in the request
	// directory's script/ (Script.Files).
	Mounted bool `json:"mounted"`
	// Shared says the zygote serves other tenants' requests too; the
	// child then refuses IP sockets, TCP, IPC and scoped channels.
	Shared bool `json:"shared"`
}

// Check is one warm-up finding the agent reports in its ready message.
type Check struct {
	Name   string `json:"name"`
	Level  string `json:"level"` // "info" or "warn"
	Detail string `json:"detail"`
	// Count is check-specific: threads alive (threads), libraries that drew
	// OS randomness before the first fork and are not reseeded, -1 when the
	// guard is not loaded (native_random).
	Count int `json:"count,omitempty"`
}

// requestPair returns a request socket: a connected AF_UNIX SOCK_SEQPACKET
// pair, both ends close-on-exec and non-blocking from their creation, ours
// in the poller and the child's as a bare descriptor (for sendFD), which
// the child makes blocking (child.py _serve). Made so, the pair costs one
// fcntl (os.NewFile's) where socketPair's costs three. The caller owns both.
func requestPair() (local sockConn, remote int, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, -1, fmt.Errorf("creating socket pair: %w", err)
	}
	c, err := wrapNonblocking(fds[0])
	if err != nil {
		unix.Close(fds[1])
		return nil, -1, fmt.Errorf("wrapping socket: %w", err)
	}
	return c, fds[1], nil
}

// send writes one message, with f's descriptor attached as SCM_RIGHTS when
// f is not nil, as one datagram: its JSON, then, for a go message with an
// inline event (m.Event), a newline and the event's bytes. The caller keeps
// ownership of f.
func send(c sockConn, m message, f *os.File) error {
	fd := -1
	if f != nil {
		fd = int(f.Fd())
	}
	return sendFD(c, m, fd)
}

// sendFD is send with the descriptor fd (-1: none) attached.
func sendFD(c sockConn, m message, fd int) error {
	bp := sendBufs.Get().(*[]byte)
	defer sendBufs.Put(bp)
	b, ok := quickEncode((*bp)[:0], &m)
	if !ok {
		var err error
		if b, err = json.Marshal(m); err != nil {
			return err
		}
	} else {
		*bp = b[:0]
	}
	if len(m.Event) > 0 {
		// json.Marshal and quickEncode write no raw newline (one in a string is \n), so
		// the first newline ends the JSON (FuzzGoFraming).
		b = append(append(b, '\n'), m.Event...)
		if ok {
			*bp = b[:0]
		}
	}
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("sending %s: %w", m.Type, err)
	}
	return nil
}

// sendBufs are send's buffers for the messages quickEncode writes.
var sendBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// quickEncode appends m to b as json.Marshal writes it, byte for byte, when
// m is one of the supervisor's messages of every request (fork, go): only
// Type, Seq, RequestID, Dir, DeadlineMs, Function, Version and Strict set,
// each string printable ASCII that JSON writes as it is (no quote,
// backslash or HTML character); ok is false (b unusable) for anything else,
// which json.Marshal encodes. TestQuickEncodeIsMarshal holds it to that.
func quickEncode(b []byte, m *message) (_ []byte, ok bool) {
	if m.PID != 0 || m.Code != nil || m.Signal != 0 || m.Python != "" || m.OpenSSL != "" || m.ForkSafe != nil ||
		m.Checks != nil || m.Error != nil || m.Script != nil {
		return b, false
	}
	for _, s := range [...]string{m.Type, m.RequestID, m.Dir, m.Function, m.Version} {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				return b, false
			}
		}
	}
	b = append(b, `{"type":"`...)
	b = append(b, m.Type...)
	b = append(b, '"')
	if m.Seq != 0 {
		b = strconv.AppendInt(append(b, `,"seq":`...), int64(m.Seq), 10)
	}
	str := func(b []byte, key, v string) []byte {
		if v == "" {
			return b
		}
		b = append(append(append(b, `,"`...), key...), `":"`...)
		return append(append(b, v...), '"')
	}
	b = str(b, "request_id", m.RequestID)
	b = str(b, "dir", m.Dir)
	if m.DeadlineMs != 0 {
		b = strconv.AppendInt(append(b, `,"deadline_ms":`...), m.DeadlineMs, 10)
	}
	b = str(b, "function", m.Function)
	b = str(b, "version", m.Version)
	if m.Strict {
		b = append(b, `,"strict":true`...)
	}
	if m.EventBytes != 0 {
		b = strconv.AppendInt(append(b, `,"event_bytes":`...), int64(m.EventBytes), 10)
	}
	return append(b, '}'), true
}

// recv reads one message. If the sender attached credentials (or the socket
// has SO_PASSCRED), creds holds them with the pid translated into our pid
// namespace by the kernel (unix(7), SCM_CREDENTIALS).
func recv(c sockConn) (m message, creds *unix.Ucred, err error) {
	bp := datagrams.Get().(*datagram)
	defer datagrams.Put(bp)
	buf, oob := bp.data[:], bp.oob[:oobSpace]
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
	if err := decodeMessage(buf[:n], &m); err != nil {
		return m, creds, err
	}
	return m, creds, nil
}

// datagrams are recv's buffers: a datagram may be 64 KiB, and one allocated
// per message was most of the bytes the daemon allocated per request (its
// GC). decodeMessage copies what it keeps, so a buffer is reused as soon as
// the message is decoded.
var datagrams = sync.Pool{New: func() any { return new(datagram) }}

// datagram is one of recv's buffers: the message, and its control data
// (oobSpace bytes of oob: credentials and up to four descriptors).
type datagram struct {
	data [maxDatagram]byte
	oob  [128]byte
}

var oobSpace = unix.CmsgSpace(unix.SizeofUcred) + unix.CmsgSpace(4*8)

// decodeMessage decodes one message b into m, an error saying it is
// malformed when it is not JSON of a message. The messages of every
// request (hello, forked, exited) come as the agents write them,
// {"type":"exited","seq":S,"pid":P,"code":N} without a space
// (agents/python/zygo_agent/zygote.py, child.py): quickMessage reads those
// exact forms without the reflection of a JSON decode; anything else,
// however close, goes to json.Unmarshal.
func decodeMessage(b []byte, m *message) error {
	if quickMessage(b, m) {
		return nil
	}
	*m = message{}
	if err := json.Unmarshal(b, m); err != nil {
		return fmt.Errorf("malformed message: %w", err)
	}
	return nil
}

// quickMessage decodes b into m (which it may change even when it fails)
// when b is exactly {"type":"T"} followed, before its closing brace, by
// members ,"K":N: T one of hello, forked and exited, each K one of seq,
// pid, code and signal at most once, each N a non-negative JSON integer of
// at most 18 digits; no white space anywhere. It reports whether b was one:
// m is then what json.Unmarshal would decode (FuzzQuickMessage).
func quickMessage(b []byte, m *message) bool {
	*m = message{}
	const head = `{"type":"`
	if len(b) < len(head) || string(b[:len(head)]) != head {
		return false
	}
	b = b[len(head):]
	end := bytes.IndexByte(b, '"')
	if end < 0 {
		return false
	}
	switch string(b[:end]) {
	case "hello":
		m.Type = "hello"
	case "forked":
		m.Type = "forked"
	case "exited":
		m.Type = "exited"
	default:
		return false
	}
	b = b[end+1:]
	var seen [4]bool
	for len(b) > 0 && b[0] == ',' {
		if len(b) < 2 || b[1] != '"' {
			return false
		}
		b = b[2:]
		end := bytes.IndexByte(b, '"')
		if end < 0 || len(b) < end+2 || b[end+1] != ':' {
			return false
		}
		key := b[:end]
		b = b[end+2:]
		digits := 0
		for digits < len(b) && b[digits] >= '0' && b[digits] <= '9' {
			digits++
		}
		if digits == 0 || digits > 18 || (digits > 1 && b[0] == '0') {
			return false
		}
		var n int
		for _, c := range b[:digits] {
			n = n*10 + int(c-'0')
		}
		b = b[digits:]
		var k int
		switch string(key) {
		case "seq":
			k, m.Seq = 0, n
		case "pid":
			k, m.PID = 1, n
		case "code":
			code := n
			k, m.Code = 2, &code
		case "signal":
			k, m.Signal = 3, n
		default:
			return false
		}
		if seen[k] {
			return false
		}
		seen[k] = true
	}
	return len(b) == 1 && b[0] == '}'
}

// setPassCred turns on SO_PASSCRED so that the kernel attaches the sender's
// credentials to every message we receive.
func setPassCred(c sockConn) error {
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

// channel is one end of a supervisor–agent connection: SOCK_SEQPACKET
// datagrams (Python agent) or newline-delimited JSON on SOCK_STREAM (Node
// workers, whose standard library has neither SEQPACKET nor fd passing).
type channel interface {
	send(m message, f *os.File) error
	sendFD(m message, fd int) error // fd -1: none
	recv() (message, *unix.Ucred, error)
	setPassCred() error
	close() error
}

type packetChannel struct{ c sockConn }

func (p packetChannel) send(m message, f *os.File) error    { return send(p.c, m, f) }
func (p packetChannel) sendFD(m message, fd int) error      { return sendFD(p.c, m, fd) }
func (p packetChannel) recv() (message, *unix.Ucred, error) { return recv(p.c) }
func (p packetChannel) setPassCred() error                  { return setPassCred(p.c) }
func (p packetChannel) close() error                        { return p.c.Close() }

// streamChannel frames messages as JSON lines. Descriptors cannot be sent
// on it.
type streamChannel struct {
	c     sockConn
	buf   []byte
	creds *unix.Ucred // from the latest read that carried credentials
}

func (s *streamChannel) sendFD(m message, fd int) error {
	if fd >= 0 {
		return fmt.Errorf("sending %s: a stream channel cannot carry descriptors", m.Type)
	}
	return s.send(m, nil)
}

func (s *streamChannel) send(m message, f *os.File) error {
	if f != nil {
		return fmt.Errorf("sending %s: a stream channel cannot carry descriptors", m.Type)
	}
	if len(m.Event) > 0 {
		return fmt.Errorf("sending %s: a stream channel carries no inline event", m.Type)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if _, err := s.c.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("sending %s: %w", m.Type, err)
	}
	return nil
}

func (s *streamChannel) recv() (message, *unix.Ucred, error) {
	var m message
	for {
		if i := bytes.IndexByte(s.buf, '\n'); i >= 0 {
			line := s.buf[:i]
			s.buf = s.buf[i+1:]
			if len(line) > maxDatagram {
				return m, nil, fmt.Errorf("message larger than %d bytes", maxDatagram)
			}
			if err := decodeMessage(line, &m); err != nil {
				return m, s.creds, err
			}
			return m, s.creds, nil
		}
		if len(s.buf) > maxDatagram {
			return m, nil, fmt.Errorf("message larger than %d bytes", maxDatagram)
		}
		chunk := make([]byte, 16<<10)
		oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
		n, oobn, _, _, err := s.c.ReadMsgUnix(chunk, oob)
		if n == 0 && err == nil {
			err = fmt.Errorf("peer closed the socket")
		}
		if err != nil {
			return m, nil, err
		}
		if oobn > 0 {
			if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, cm := range msgs {
					if uc, err := unix.ParseUnixCredentials(&cm); err == nil {
						s.creds = uc
					}
				}
			}
		}
		s.buf = append(s.buf, chunk[:n]...)
	}
}

func (s *streamChannel) setPassCred() error { return setPassCred(s.c) }
func (s *streamChannel) close() error       { return s.c.Close() }

// socketPair returns a connected AF_UNIX pair of the given type, both ends
// close-on-exec; the caller owns both. Our end is non-blocking and in the
// runtime's poller (fdConn); the remote end, which goes to the agent, stays
// blocking (a descriptor's O_NONBLOCK is shared with whoever it is passed
// to).
func socketPair(typ int) (sockConn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("creating socket pair: %w", err)
	}
	remote := os.NewFile(uintptr(fds[1]), "zygo-remote")
	c, err := newFDConn(fds[0])
	if err != nil {
		remote.Close()
		return nil, nil, fmt.Errorf("wrapping socket: %w", err)
	}
	return c, remote, nil
}

// sockConn is what the channels use of our end of a socket: *net.UnixConn
// has these methods, and so has fdConn.
type sockConn interface {
	ReadMsgUnix(b, oob []byte) (n, oobn, flags int, addr *net.UnixAddr, err error)
	WriteMsgUnix(b, oob []byte, addr *net.UnixAddr) (n, oobn int, err error)
	Write(b []byte) (int, error)
	SyscallConn() (syscall.RawConn, error)
	SetReadDeadline(t time.Time) error
	Close() error
}

// fdConn is our end of a socket pair as a pollable *os.File, read and written
// with recvmsg and sendmsg through its RawConn. net.FileConn, which it
// replaces, dups the descriptor and asks the kernel for its flags, type and
// both addresses: about ten system calls for every request socket (a child's),
// where this makes four (F_SETFL, os.NewFile's F_GETFL, the poller's
// epoll_ctl, and the remote end's F_GETFL).
type fdConn struct {
	f  *os.File
	rc syscall.RawConn
}

var _ sockConn = (*fdConn)(nil)

// newFDConn makes fd (owned from then on, closed on error) non-blocking
// and wraps it.
func newFDConn(fd int) (*fdConn, error) {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, unix.O_RDWR|unix.O_NONBLOCK); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("making the socket non-blocking: %w", err)
	}
	return wrapNonblocking(fd)
}

// wrapNonblocking wraps fd, already non-blocking (owned from then on,
// closed on error): os.NewFile puts it in the poller.
func wrapNonblocking(fd int) (*fdConn, error) {
	f := os.NewFile(uintptr(fd), "zygo-local")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &fdConn{f: f, rc: rc}, nil
}

// ReadMsgUnix reads one message (recvmsg(2), MSG_CMSG_CLOEXEC), waiting
// in the poller; addr is always nil.
func (c *fdConn) ReadMsgUnix(b, oob []byte) (n, oobn, flags int, addr *net.UnixAddr, err error) {
	op := msgOps.Get().(*msgOp)
	defer op.done()
	op.b, op.oob = b, oob
	if rerr := c.rc.Read(op.recv); rerr != nil {
		return 0, 0, 0, nil, rerr
	}
	if op.err != nil {
		return 0, 0, 0, nil, os.NewSyscallError("recvmsg", op.err)
	}
	return op.n, op.oobn, op.flags, nil, nil
}

// WriteMsgUnix sends b with oob (sendmsg(2)), waiting in the poller while
// the socket is full; addr must be nil.
func (c *fdConn) WriteMsgUnix(b, oob []byte, addr *net.UnixAddr) (n, oobn int, err error) {
	if addr != nil {
		return 0, 0, errors.New("fdConn: no addresses on a connected pair")
	}
	op := msgOps.Get().(*msgOp)
	defer op.done()
	op.b, op.oob = b, oob
	if werr := c.rc.Write(op.send); werr != nil {
		return 0, 0, werr
	}
	if op.err != nil {
		return 0, 0, os.NewSyscallError("sendmsg", op.err)
	}
	return op.n, len(oob), nil
}

// msgOp is one recvmsg or sendmsg of an fdConn: its buffers and results,
// and the functions the RawConn calls with the descriptor, made once per
// msgOp. (Closures over each call's results cost four allocations a call,
// and every request makes five.)
type msgOp struct {
	b, oob         []byte
	n, oobn, flags int
	err            error
	recv, send     func(fd uintptr) bool
}

var msgOps = sync.Pool{New: func() any {
	op := new(msgOp)
	op.recv = func(fd uintptr) bool {
		for {
			op.n, op.oobn, op.flags, _, op.err = unix.Recvmsg(int(fd), op.b, op.oob, unix.MSG_CMSG_CLOEXEC)
			if op.err != unix.EINTR { //nolint:errorlint // the system call's own errno, never wrapped
				return op.err != unix.EAGAIN //nolint:errorlint // as above
			}
		}
	}
	op.send = func(fd uintptr) bool {
		for {
			op.n, op.err = unix.SendmsgN(int(fd), op.b, op.oob, nil, 0)
			if op.err != unix.EINTR { //nolint:errorlint // the system call's own errno, never wrapped
				return op.err != unix.EAGAIN //nolint:errorlint // as above
			}
		}
	}
	return op
}}

// done returns op to msgOps, holding none of its caller's memory.
func (op *msgOp) done() {
	*op = msgOp{recv: op.recv, send: op.send}
	msgOps.Put(op)
}

func (c *fdConn) Write(b []byte) (int, error)           { return c.f.Write(b) }
func (c *fdConn) SyscallConn() (syscall.RawConn, error) { return c.rc, nil }
func (c *fdConn) SetReadDeadline(t time.Time) error     { return c.f.SetReadDeadline(t) }
func (c *fdConn) Close() error                          { return c.f.Close() }
