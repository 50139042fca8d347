package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// catSandboxes is a Sandboxes whose Exec behaves as cat: it copies the request's stdin to
// stdout as it reads it, and exits 0 at EOF. With exitAtOnce it exits 0 without reading.
type catSandboxes struct {
	Sandboxes
	exitAtOnce bool

	mu       sync.Mutex
	hadStdin bool
	ctxErr   error // the exec's ctx error when it ended on a read error
	ended    chan struct{}
}

func newCat() *catSandboxes { return &catSandboxes{ended: make(chan struct{})} }

func (f *catSandboxes) Exec(ctx context.Context, _ string, req guest.ExecRequest, stdout, _ io.Writer) (guest.ExitStatus, error) {
	defer close(f.ended)
	f.mu.Lock()
	f.hadStdin = req.Stdin != nil
	f.mu.Unlock()
	if req.Stdin == nil || f.exitAtOnce {
		return guest.ExitStatus{}, nil
	}
	buf := make([]byte, 4<<10)
	for {
		n, err := req.Stdin.Read(buf)
		stdout.Write(buf[:n])
		if errors.Is(err, io.EOF) {
			return guest.ExitStatus{}, nil
		}
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
			}
			f.mu.Lock()
			f.ctxErr = ctx.Err()
			f.mu.Unlock()
			return guest.ExitStatus{}, err
		}
	}
}

// syncWaiter is an io.Writer a test can wait on.
type syncWaiter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *syncWaiter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *syncWaiter) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		got := w.buf.String()
		w.mu.Unlock()
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("output %q, want %q", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The handler reads the streamed stdin while it answers: the second line is only sent after
// the first came back, and the end of stdin ends the command.
func TestExecStdinFullDuplex(t *testing.T) {
	f := newCat()
	c := newTestServer(t, f, nil)
	pr, pw := io.Pipe()
	out := &syncWaiter{}
	type result struct {
		st  wire.ExitStatus
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := c.ExecStream(context.Background(), "sb-1", wire.ExecBody{Argv: []string{"cat"}}, pr, out, nil)
		done <- result{st, err}
	}()
	io.WriteString(pw, "one\n")
	out.waitFor(t, "one\n")
	io.WriteString(pw, "two\n")
	out.waitFor(t, "one\ntwo\n")
	pw.Close()
	select {
	case r := <-done:
		if r.err != nil || r.st.Code != 0 {
			t.Fatalf("exec after stdin's EOF: %+v %v", r.st, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("exec did not end after stdin's EOF")
	}
}

// The JSON form still works, and without either form the command gets no stdin.
func TestExecStdinJSONAndNone(t *testing.T) {
	ctx := context.Background()
	f := newCat()
	var out bytes.Buffer
	if _, err := newTestServer(t, f, nil).Exec(ctx, "sb-1", wire.ExecBody{Argv: []string{"cat"}, Stdin: []byte("abc")}, &out, nil); err != nil || out.String() != "abc" {
		t.Fatalf("stdin in the JSON: %v %q", err, out.String())
	}
	f = newCat()
	if _, err := newTestServer(t, f, nil).Exec(ctx, "sb-1", wire.ExecBody{Argv: []string{"cat"}}, nil, nil); err != nil || f.hadStdin {
		t.Fatalf("no stdin: %v, the command had one: %v", err, f.hadStdin)
	}
}

func TestExecStdinBadBodies(t *testing.T) {
	ctx := context.Background()
	c := newTestServer(t, newCat(), nil)
	_, err := c.ExecStream(ctx, "sb-1", wire.ExecBody{Argv: []string{"cat"}, Stdin: []byte("x")}, strings.NewReader("y"), nil, nil)
	if err == nil {
		t.Error("stdin given twice was accepted by the client")
	}
	for body, want := range map[string]string{
		`{"argv":["cat"],"stdin":"eA==","stdin_stream":true}` + "\nx": "exclude each other",
		`{"argv":["cat"],"stdin_stream":true}x`:                       "followed by a newline",
		`{"argv":["cat"],"stdin_stream":true}`:                        "followed by a newline",
	} {
		err := rawCall(t, c, "POST", sbPath("sb-1", "exec"), strings.NewReader(body), "")
		wantAPIError(t, err, http.StatusBadRequest, want)
	}
}

// A command that ends without reading its stdin ends the call, even when stdin never yields.
func TestExecStdinCommandExitsFirst(t *testing.T) {
	f := newCat()
	f.exitAtOnce = true
	c := newTestServer(t, f, nil)
	pr, pw := io.Pipe() // never written
	defer pw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	st, err := c.ExecStream(ctx, "sb-1", wire.ExecBody{Argv: []string{"true"}}, pr, nil, nil)
	if err != nil || st.Code != 0 || time.Since(t0) > 5*time.Second {
		t.Fatalf("exec that ignores a silent stdin: %+v %v after %v", st, err, time.Since(t0))
	}
}

// A client that goes away while still sending stdin kills the command: the exec's ctx ends.
func TestExecStdinClientGoneCancels(t *testing.T) {
	f := newCat()
	c := newTestServer(t, f, nil)
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncWaiter{}
	done := make(chan error, 1)
	go func() {
		_, err := c.ExecStream(ctx, "sb-1", wire.ExecBody{Argv: []string{"cat"}}, pr, out, nil)
		done <- err
	}()
	io.WriteString(pw, "x")
	out.waitFor(t, "x")
	cancel()
	<-done
	select {
	case <-f.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the exec still runs after its client went away")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !errors.Is(f.ctxErr, context.Canceled) {
		t.Errorf("exec ctx after the client went away: %v, want cancelled", f.ctxErr)
	}
}

// A client that streams part of a stdin and then stays connected, silent, gets its answer when
// the command ends, and the server lets go of the connection instead of waiting for the rest.
func TestExecStdinSilentClientReleased(t *testing.T) {
	f := newCat()
	f.exitAtOnce = true
	srv := NewServer(nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), "test").WithSandboxes(f, nil)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	chunk := `{"argv":["true"],"stdin_stream":true}` + "\npartial"
	fmt.Fprintf(conn, "POST /v1/sandboxes/sb-1/exec HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(chunk), chunk)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(conn) // the answer, then EOF when the server closes
	if err != nil {
		t.Fatalf("after %q the server kept the connection open: %v", got, err)
	}
	if !bytes.Contains(got, []byte(`"exit"`)) {
		t.Errorf("answer without the exit event: %q", got)
	}
}

// Bodies the exec route refuses with 400 before anything runs: a second JSON object after the
// first, an env entry without '=', a relative cwd.
func TestExecRefusesMalformedRequests(t *testing.T) {
	f := newCat()
	c := newTestServer(t, f, nil)
	for body, want := range map[string]string{
		`{"argv":["true"]}{"argv":["false"]}`: "after the JSON object",
		`{"argv":["true"],"env":["FOO"]}`:     "KEY=VALUE",
		`{"argv":["true"],"env":["=x"]}`:      "KEY=VALUE",
		`{"argv":["true"],"cwd":"../.."}`:     "absolute",
	} {
		err := rawCall(t, c, "POST", sbPath("sb-1", "exec"), strings.NewReader(body), "")
		wantAPIError(t, err, http.StatusBadRequest, want)
	}
	select {
	case <-f.ended:
		t.Error("a refused exec reached the manager")
	default:
	}
}
