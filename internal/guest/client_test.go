package guest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingListener counts every byte the server side reads from its connections.
type countingListener struct {
	net.Listener
	read atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: &l.read}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// syncBuf is a goroutine-safe log sink.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) count(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), sub)
}

func serveCounting(t *testing.T, log *slog.Logger) (*Client, *countingListener, string) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "zgc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	ctx, cancel := context.WithCancel(context.Background())
	c := NewClient(strings.Repeat("t", 64), log)
	go c.Serve(ctx, cl)
	t.Cleanup(func() { cancel(); c.Close(); ln.Close() })
	return c, cl, sock
}

// A connection streaming 10 MB that is not a handshake is cut off after at most maxHelloBytes:
// the host reads no more than that, and the writer sees the connection closed long before 10 MB.
func TestHelloFloodIsBounded(t *testing.T) {
	_, cl, sock := serveCounting(t, slog.New(slog.NewTextHandler(io.Discard, nil)))
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const total = 10 << 20
	chunk := bytes.Repeat([]byte("A"), 64<<10)
	written := 0
	_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	for written < total {
		n, err := conn.Write(chunk)
		written += n
		if err != nil {
			break
		}
	}
	if written >= total {
		t.Fatalf("host accepted all %d bytes of a hello without a newline", written)
	}
	if got := cl.read.Load(); got > maxHelloBytes {
		t.Errorf("host read %d bytes of an unauthenticated hello, limit %d", got, maxHelloBytes)
	}
	t.Logf("client wrote %d bytes before close; host read %d", written, cl.read.Load())
}

// At most maxPendingConns connections may sit in the Hello exchange; the next is closed at
// once, and a storm of rejections logs one warning, not one per connection.
func TestPendingConnectionsBoundedAndWarningsRateLimited(t *testing.T) {
	var logs syncBuf
	c, _, sock := serveCounting(t, slog.New(slog.NewTextHandler(&logs, nil)))
	var idle []net.Conn
	for range maxPendingConns {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, conn)
	}
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	deadline := time.Now().Add(time.Second)
	for {
		c.mu.Lock()
		p := c.pending
		c.mu.Unlock()
		if p == maxPendingConns {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pending = %d, want %d", p, maxPendingConns)
		}
		time.Sleep(5 * time.Millisecond)
	}
	extra, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	start := time.Now()
	_ = extra.SetReadDeadline(time.Now().Add(helloTimeout))
	if _, err := extra.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("extra connection read = %v, want EOF (closed at once)", err)
	}
	if d := time.Since(start); d > helloTimeout/2 {
		t.Errorf("extra connection closed after %v, want at once", d)
	}
	for range 50 {
		if conn, err := net.Dial("unix", sock); err == nil {
			_, _ = conn.Read(make([]byte, 1))
			conn.Close()
		}
	}
	if n := logs.count("rejecting guest connection"); n != 1 {
		t.Errorf("%d rejection warnings for 51 rejected connections, want 1:\n%s", n, logs.b.String())
	}
}

// A bad hello is rejected without the socket's idle pre-auth slots staying taken.
func TestBadHelloFreesSlot(t *testing.T) {
	c, _, sock := serveCounting(t, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for range 3 * maxPendingConns {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write([]byte(`{"proto":1,"token":"wrong"}` + "\n"))
		_, _ = io.ReadAll(conn)
		conn.Close()
	}
	time.Sleep(50 * time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending != 0 {
		t.Errorf("pending = %d after rejected hellos, want 0", c.pending)
	}
}
