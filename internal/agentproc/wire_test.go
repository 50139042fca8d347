package agentproc

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pair returns a connected socket pair of type typ: our end, wrapped as
// wire.go wraps it, and the peer's end as the agent would hold it.
func pair(t *testing.T, typ int) (local sockConn, peer *net.UnixConn, peerFile *os.File) {
	t.Helper()
	local, remote, err := socketPair(typ)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.FileConn(remote)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		local.Close()
		c.Close()
		remote.Close()
	})
	return local, c.(*net.UnixConn), remote
}

// recvTimeout receives one message from ch, failing the test if none
// arrives within 5 s.
func recvTimeout(t *testing.T, ch channel) (message, *unix.Ucred, error) {
	t.Helper()
	type got struct {
		m   message
		c   *unix.Ucred
		err error
	}
	done := make(chan got, 1)
	go func() {
		m, c, err := ch.recv()
		done <- got{m, c, err}
	}()
	select {
	case g := <-done:
		return g.m, g.c, g.err
	case <-time.After(5 * time.Second):
		t.Fatal("recv did not return within 5s")
		return message{}, nil, nil
	}
}

func write(t *testing.T, c *net.UnixConn, s string) {
	t.Helper()
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatalf("writing %d bytes: %v", len(s), err)
	}
}

// jsonOfSize is a valid message of exactly n bytes.
func jsonOfSize(t *testing.T, n int) string {
	t.Helper()
	s := `{"type":"ready","dir":"` + strings.Repeat("x", n-len(`{"type":"ready","dir":""}`)) + `"}`
	if len(s) != n {
		t.Fatalf("built %d bytes, want %d", len(s), n)
	}
	return s
}

func TestPacketRoundTrip(t *testing.T) {
	local, peer, _ := pair(t, unix.SOCK_SEQPACKET)
	ours, theirs := packetChannel{local}, packetChannel{peer}
	code, forkSafe := 3, true
	sent := message{Type: "go", Seq: 7, PID: 42, Code: &code, ForkSafe: &forkSafe, RequestID: "r-1",
		Dir: "/run/zygo/req/abc", DeadlineMs: 1500, Function: "hello", Version: "sha256:1", Strict: true,
		Checks: []Check{{Name: "threads", Level: "warn", Detail: "2 threads"}}, Error: json.RawMessage(`{"type":"X"}`)}
	if err := ours.send(sent, nil); err != nil {
		t.Fatal(err)
	}
	got, creds, err := recvTimeout(t, theirs)
	if err != nil {
		t.Fatal(err)
	}
	if creds != nil {
		t.Errorf("credentials without SO_PASSCRED: %+v", creds)
	}
	a, _ := json.Marshal(sent)
	b, _ := json.Marshal(got)
	if !bytes.Equal(a, b) {
		t.Errorf("received %s\n    sent %s", b, a)
	}
}

// Each write is one message: two writes are never merged, a read never
// returns half of one.
func TestPacketBoundaries(t *testing.T) {
	local, peer, _ := pair(t, unix.SOCK_SEQPACKET)
	ch := packetChannel{local}
	write(t, peer, `{"type":"a","seq":1}`)
	write(t, peer, `{"type":"b","seq":2}`)
	for _, want := range []string{"a", "b"} {
		m, _, err := recvTimeout(t, ch)
		if err != nil || m.Type != want {
			t.Fatalf("recv = %+v, %v; want type %q", m, err, want)
		}
	}
}

func TestPacketSizeLimit(t *testing.T) {
	local, peer, _ := pair(t, unix.SOCK_SEQPACKET)
	ch := packetChannel{local}

	write(t, peer, jsonOfSize(t, maxDatagram))
	m, _, err := recvTimeout(t, ch)
	if err != nil || len(m.Dir) != maxDatagram-len(`{"type":"ready","dir":""}`) {
		t.Fatalf("message of exactly %d bytes: %v", maxDatagram, err)
	}

	write(t, peer, jsonOfSize(t, maxDatagram+1))
	if _, _, err := recvTimeout(t, ch); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("message of %d bytes: err = %v, want a size error", maxDatagram+1, err)
	}
	// The oversize datagram was dropped whole; the next one is intact.
	write(t, peer, `{"type":"next"}`)
	if m, _, err := recvTimeout(t, ch); err != nil || m.Type != "next" {
		t.Errorf("after an oversize message: %+v, %v", m, err)
	}
}

func TestPacketMalformed(t *testing.T) {
	local, peer, _ := pair(t, unix.SOCK_SEQPACKET)
	ch := packetChannel{local}
	for _, bad := range []string{"not json", `{"type":`, `["type","go"]`, `{"type":5}`} {
		write(t, peer, bad)
		if _, _, err := recvTimeout(t, ch); err == nil || !strings.Contains(err.Error(), "malformed message") {
			t.Errorf("%q: err = %v, want a malformed message error", bad, err)
		}
	}
	write(t, peer, `{"type":"ok"}`)
	if m, _, err := recvTimeout(t, ch); err != nil || m.Type != "ok" {
		t.Errorf("after malformed messages: %+v, %v", m, err)
	}
}

func TestPeerClosed(t *testing.T) {
	for _, c := range []struct {
		name string
		typ  int
		ch   func(sockConn) channel
	}{
		{"packet", unix.SOCK_SEQPACKET, func(c sockConn) channel { return packetChannel{c} }},
		{"stream", unix.SOCK_STREAM, func(c sockConn) channel { return &streamChannel{c: c} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			local, peer, remote := pair(t, c.typ)
			peer.Close()
			remote.Close()
			if _, _, err := recvTimeout(t, c.ch(local)); err == nil {
				t.Error("recv after the peer closed returned no error")
			}
		})
	}
}

func TestPassCred(t *testing.T) {
	for _, c := range []struct {
		name string
		typ  int
		ch   func(sockConn) channel
	}{
		{"packet", unix.SOCK_SEQPACKET, func(c sockConn) channel { return packetChannel{c} }},
		{"stream", unix.SOCK_STREAM, func(c sockConn) channel { return &streamChannel{c: c} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			local, peer, _ := pair(t, c.typ)
			ch := c.ch(local)
			if err := ch.setPassCred(); err != nil {
				t.Fatal(err)
			}
			write(t, peer, "{\"type\":\"ready\",\"pid\":1}\n")
			m, creds, err := recvTimeout(t, ch)
			if err != nil || m.Type != "ready" {
				t.Fatalf("recv = %+v, %v", m, err)
			}
			if creds == nil {
				t.Fatal("no credentials with SO_PASSCRED set")
			}
			if int(creds.Pid) != os.Getpid() || int(creds.Uid) != os.Getuid() || int(creds.Gid) != os.Getgid() {
				t.Errorf("credentials %+v, want pid %d uid %d gid %d", creds, os.Getpid(), os.Getuid(), os.Getgid())
			}
			if m.PID != 1 {
				t.Errorf("the pid the agent claims (%d) is the message's, separate from the kernel's", m.PID)
			}
		})
	}
}

// send attaches a descriptor with SCM_RIGHTS; the agent receives a working
// duplicate of it.
func TestSendDescriptor(t *testing.T) {
	local, _, remote := pair(t, unix.SOCK_SEQPACKET)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := (packetChannel{local}).send(message{Type: "fork", Seq: 5}, w); err != nil {
		t.Fatal(err)
	}
	w.Close() // the caller keeps ownership: closing ours leaves the peer's copy open

	buf := make([]byte, maxDatagram)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(int(remote.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	var m message
	if err := json.Unmarshal(buf[:n], &m); err != nil || m.Type != "fork" || m.Seq != 5 {
		t.Fatalf("message %q: %+v, %v", buf[:n], m, err)
	}
	cms, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(cms) != 1 {
		t.Fatalf("control messages: %d, %v", len(cms), err)
	}
	fds, err := unix.ParseUnixRights(&cms[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("rights: %v, %v", fds, err)
	}
	got := os.NewFile(uintptr(fds[0]), "received")
	if _, err := got.WriteString("through the passed fd"); err != nil {
		t.Fatal(err)
	}
	got.Close()
	data := make([]byte, 64)
	n, _ = r.Read(data)
	if string(data[:n]) != "through the passed fd" {
		t.Errorf("pipe read %q", data[:n])
	}
}

// Descriptors an agent sends are never expected: recv closes them rather
// than leaking them into the daemon.
func TestRecvClosesUnexpectedDescriptors(t *testing.T) {
	local, _, remote := pair(t, unix.SOCK_SEQPACKET)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := unix.Sendmsg(int(remote.Fd()), []byte(`{"type":"ready"}`), unix.UnixRights(int(w.Fd())), nil, 0); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if m, _, err := recvTimeout(t, packetChannel{local}); err != nil || m.Type != "ready" {
		t.Fatalf("recv = %+v, %v", m, err)
	}
	// With every copy of the write end closed, the read end sees EOF.
	r.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := r.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Errorf("pipe read = %d, %v; want EOF (recv kept the passed descriptor open)", n, err)
	}
}

func TestStreamFraming(t *testing.T) {
	t.Run("several messages in one write", func(t *testing.T) {
		local, peer, _ := pair(t, unix.SOCK_STREAM)
		ch := &streamChannel{c: local}
		write(t, peer, "{\"type\":\"a\"}\n{\"type\":\"b\",\"seq\":2}\n{\"type\":\"c\",\"request_id\":\"r\\n1\"}\n")
		for _, want := range []message{{Type: "a"}, {Type: "b", Seq: 2}, {Type: "c", RequestID: "r\n1"}} {
			m, _, err := recvTimeout(t, ch)
			if err != nil || m.Type != want.Type || m.Seq != want.Seq || m.RequestID != want.RequestID {
				t.Fatalf("recv = %+v, %v; want %+v", m, err, want)
			}
		}
	})
	t.Run("one message split across writes", func(t *testing.T) {
		local, peer, _ := pair(t, unix.SOCK_STREAM)
		ch := &streamChannel{c: local}
		msg := "{\"type\":\"ready\",\"pid\":77,\"checks\":[{\"name\":\"n\",\"level\":\"info\",\"detail\":\"d\"}]}\n"
		go func() {
			for i := range len(msg) { // one byte per write, with pauses so recv sees the pieces
				peer.Write([]byte{msg[i]})
				if i%16 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
		m, _, err := recvTimeout(t, ch)
		if err != nil || m.Type != "ready" || m.PID != 77 || len(m.Checks) != 1 || m.Checks[0].Detail != "d" {
			t.Fatalf("recv = %+v, %v", m, err)
		}
	})
	t.Run("a message and the start of the next", func(t *testing.T) {
		local, peer, _ := pair(t, unix.SOCK_STREAM)
		ch := &streamChannel{c: local}
		write(t, peer, "{\"type\":\"first\"}\n{\"type\":\"sec")
		if m, _, err := recvTimeout(t, ch); err != nil || m.Type != "first" {
			t.Fatalf("recv = %+v, %v", m, err)
		}
		write(t, peer, "ond\"}\n")
		if m, _, err := recvTimeout(t, ch); err != nil || m.Type != "second" {
			t.Fatalf("recv = %+v, %v", m, err)
		}
	})
	t.Run("send writes one line", func(t *testing.T) {
		local, peer, _ := pair(t, unix.SOCK_STREAM)
		if err := (&streamChannel{c: local}).send(message{Type: "go", RequestID: "a\nb"}, nil); err != nil {
			t.Fatal(err)
		}
		got, _, err := recvTimeout(t, &streamChannel{c: peer})
		if err != nil || got.Type != "go" || got.RequestID != "a\nb" {
			t.Errorf("peer received %+v, %v", got, err)
		}
	})
}

func TestStreamSizeLimit(t *testing.T) {
	t.Run("exactly the limit", func(t *testing.T) {
		local, peer, _ := pair(t, unix.SOCK_STREAM)
		go peer.Write([]byte(jsonOfSize(t, maxDatagram) + "\n"))
		if _, _, err := recvTimeout(t, &streamChannel{c: local}); err != nil {
			t.Errorf("a line of exactly %d bytes: %v", maxDatagram, err)
		}
	})
	for _, size := range []int{maxDatagram + 1, maxDatagram + 10<<10, 4 * maxDatagram} {
		for _, newline := range []bool{true, false} {
			local, peer, _ := pair(t, unix.SOCK_STREAM)
			line := jsonOfSize(t, size)
			if newline {
				line += "\n"
			}
			// In a goroutine: recv stops reading, and the socket buffer
			// may not hold the whole line.
			go peer.Write([]byte(line))
			if _, _, err := recvTimeout(t, &streamChannel{c: local}); err == nil || !strings.Contains(err.Error(), "larger than") {
				t.Errorf("a line of %d bytes (newline %v): err = %v, want a size error", size, newline, err)
			}
		}
	}
}

func TestStreamMalformed(t *testing.T) {
	local, peer, _ := pair(t, unix.SOCK_STREAM)
	ch := &streamChannel{c: local}
	write(t, peer, "not json\n{\"type\":\"ok\"}\n")
	if _, _, err := recvTimeout(t, ch); err == nil || !strings.Contains(err.Error(), "malformed message") {
		t.Errorf("err = %v, want a malformed message error", err)
	}
	if m, _, err := recvTimeout(t, ch); err != nil || m.Type != "ok" {
		t.Errorf("the line after a malformed one: %+v, %v", m, err)
	}
}

func TestStreamRefusesDescriptors(t *testing.T) {
	local, _, _ := pair(t, unix.SOCK_STREAM)
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := (&streamChannel{c: local}).send(message{Type: "go"}, f); err == nil || !strings.Contains(err.Error(), "descriptors") {
		t.Errorf("send with a descriptor = %v, want an error", err)
	}
}
