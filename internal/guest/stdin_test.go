package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// lineWaiter is an io.Writer that lets a test wait until what was written contains a string.
type lineWaiter struct {
	mu  sync.Mutex
	buf bytes.Buffer
	ch  chan struct{} // receives after every write
}

func newLineWaiter() *lineWaiter { return &lineWaiter{ch: make(chan struct{}, 1)} }

func (w *lineWaiter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	w.mu.Unlock()
	select {
	case w.ch <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *lineWaiter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitFor fails the test unless the output equals want within d.
func (w *lineWaiter) waitFor(t *testing.T, want string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for w.String() != want {
		select {
		case <-w.ch:
		case <-deadline:
			t.Fatalf("output %q after %v, want %q", w.String(), d, want)
		}
	}
}

// repeatReader reads an endless run of 'y', counting what it gave out.
type repeatReader struct{ n atomic.Int64 }

func (r *repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'y'
	}
	r.n.Add(int64(len(p)))
	return len(p), nil
}

type execResult struct {
	st  ExitStatus
	err error
}

func goExec(ctx context.Context, c *Client, req ExecRequest, stdout io.Writer) <-chan execResult {
	done := make(chan execResult, 1)
	go func() {
		st, err := c.Exec(ctx, req, stdout, nil)
		done <- execResult{st, err}
	}()
	return done
}

// The command starts at once and sees each line as it is written: the second line is only
// written after cat has echoed the first. Closing stdin ends cat.
func TestExecStdinStreams(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	ctx := waitCtx(t)
	pr, pw := io.Pipe()
	out := newLineWaiter()
	done := goExec(ctx, c, ExecRequest{Argv: []string{"cat"}, Stdin: pr}, out)
	io.WriteString(pw, "one\n")
	out.waitFor(t, "one\n", 10*time.Second)
	io.WriteString(pw, "two\n")
	out.waitFor(t, "one\ntwo\n", 10*time.Second)
	select {
	case r := <-done:
		t.Fatalf("exec ended before stdin was closed: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	pw.Close()
	select {
	case r := <-done:
		if r.err != nil || r.st.Code != 0 {
			t.Fatalf("cat after EOF: %+v %v", r.st, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cat did not end after its stdin was closed")
	}
}

func TestExecStdinLarge(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	ctx := waitCtx(t)
	const size = 64 << 20
	var out bytes.Buffer
	st, err := c.Exec(ctx, ExecRequest{Argv: []string{"wc", "-c"}, Stdin: io.LimitReader(&repeatReader{}, size)}, &out, nil)
	if err != nil || st.Code != 0 || strings.TrimSpace(out.String()) != "67108864" {
		t.Fatalf("wc -c of 64 MiB: %+v %v %q", st, err, out.String())
	}
}

// A command that exits without reading all of its stdin ends the call: neither an endless
// stdin nor one that never returns keeps Exec waiting.
func TestExecStdinCommandExitsFirst(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	ctx := waitCtx(t)
	var out bytes.Buffer
	st, err := c.Exec(ctx, ExecRequest{Argv: []string{"head", "-c", "5"}, Stdin: &repeatReader{}}, &out, nil)
	if err != nil || st.Code != 0 || out.String() != "yyyyy" {
		t.Fatalf("head -c 5 of an endless stdin: %+v %v %q", st, err, out.String())
	}
	pr, pw := io.Pipe() // never written
	defer pw.Close()
	t0 := time.Now()
	st, err = c.Exec(ctx, ExecRequest{Argv: []string{"sh", "-c", "exit 4"}, Stdin: pr}, nil, nil)
	if err != nil || st.Code != 4 || time.Since(t0) > 5*time.Second {
		t.Fatalf("exit 4 with a silent stdin: %+v %v after %v", st, err, time.Since(t0))
	}
	// The channel still works afterwards.
	if _, err := c.Info(ctx); err != nil {
		t.Fatal(err)
	}
}

// A command that does not read its stdin holds only its own stream's window: other requests
// with bodies (a file, another exec's stdin) still go through on the same connection.
func TestStalledStdinDoesNotBlockChannel(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	ctx := waitCtx(t)
	sctx, cancel := context.WithCancel(ctx)
	stalled := &repeatReader{}
	done := goExec(sctx, c, ExecRequest{Argv: []string{"sleep", "60"}, Stdin: stalled}, nil)
	defer func() { cancel(); <-done }()
	// Wait until the stalled stdin stops moving: the pipe and its stream's window are full.
	last := int64(-1)
	for n := stalled.n.Load(); n != last; n = stalled.n.Load() {
		last = n
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("stalled stdin took %d KiB before it stopped", last>>10)

	dir := t.TempDir()
	const fileSize = 4 << 20
	if err := c.PutFile(ctx, filepath.Join(dir, "f"), 0o600, io.LimitReader(&repeatReader{}, fileSize)); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "f")); err != nil || fi.Size() != fileSize {
		t.Fatalf("file beside a stalled stdin: %v %v", fi, err)
	}
	var out bytes.Buffer
	st, err := c.Exec(ctx, ExecRequest{Argv: []string{"wc", "-c"}, Stdin: io.LimitReader(&repeatReader{}, 4<<20)}, &out, nil)
	if err != nil || st.Code != 0 || strings.TrimSpace(out.String()) != "4194304" {
		t.Fatalf("exec beside a stalled stdin: %+v %v %q", st, err, out.String())
	}
}

// An agent that predates streamed stdin ignores it; the host must not pretend the input was
// delivered.
func TestExecStdinRefusedByOldAgent(t *testing.T) {
	c, _, sock := serveCounting(t, slog.New(slog.NewTextHandler(io.Discard, nil)))
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hello, _ := json.Marshal(Hello{Proto: ProtocolVersion, SandboxID: "sb-old"})
	sc, reply, err := initiateChannel(conn, strings.Repeat("t", 64), hello)
	if err != nil || !bytes.Contains(reply, []byte(`"ok":true`)) {
		t.Fatalf("handshake: %q %v", reply, err)
	}
	// The old agent: it decodes the JSON (ignoring unknown fields), runs with no stdin and
	// answers an exit status.
	old := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req ExecRequest
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/x-ndjson")
		json.NewEncoder(w).Encode(Event{Exit: &ExitStatus{}})
	})
	go (&http2.Server{}).ServeConn(sc, &http2.ServeConnOpts{Handler: old})
	ctx := waitCtx(t)
	if st, err := c.Exec(ctx, ExecRequest{Argv: []string{"true"}}, nil, nil); err != nil || st.Code != 0 {
		t.Fatalf("exec without stdin on an old agent: %+v %v", st, err)
	}
	_, err = c.Exec(ctx, ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("lost?")}, nil, nil)
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "cannot stream stdin") {
		t.Fatalf("exec with stdin on an old agent = %v, want ErrFailedPrecondition", err)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errDiskOnFire }

var errDiskOnFire = errors.New("disk on fire")

// A stdin that fails abandons the call with its error, and only that call: the connection
// (and other calls on it) stays.
func TestExecStdinReadError(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	ctx := waitCtx(t)
	if _, err := c.Info(ctx); err != nil {
		t.Fatal(err)
	}
	epoch := c.Epoch()
	_, err := c.Exec(ctx, ExecRequest{Argv: []string{"cat"}, Stdin: io.MultiReader(strings.NewReader("x"), failingReader{})}, nil, nil)
	if !errors.Is(err, errDiskOnFire) || !strings.Contains(err.Error(), "reading stdin") {
		t.Fatalf("exec with a failing stdin = %v, want the read error", err)
	}
	if _, err := c.Info(ctx); err != nil || c.Epoch() != epoch {
		t.Errorf("after a failed stdin: info %v, epoch %d → %d (the connection was dropped)", err, epoch, c.Epoch())
	}
}
