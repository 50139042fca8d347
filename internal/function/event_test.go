package function

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func testManager(budget int64) *Manager {
	return &Manager{log: slog.New(slog.DiscardHandler), fns: map[string]*deployment{}, inUse: map[string]int{},
		bodies: newByteBudget(budget)}
}

// An event over the function's max_request_kib is refused having read at
// most one byte past the limit (unknown length), or nothing (declared
// length), however large the body is.
func TestReadEventStopsAtTheFunctionsLimit(t *testing.T) {
	const maxKiB = 1
	m := testManager(1 << 20)
	for _, c := range []struct {
		name     string
		size     int64
		wantRead int64
	}{
		{"unknown length", -1, maxKiB<<10 + 1},
		{"declared length", 32 << 20, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := &countingReader{r: io.LimitReader(zeros{}, 32<<20)}
			_, release, err := m.readEvent(context.Background(), body, c.size, maxKiB)
			release()
			if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "event: exceeds max_request_kib=1") {
				t.Fatalf("err %v, want ErrTooLarge naming event", err)
			}
			if got := body.n.Load(); got > c.wantRead {
				t.Errorf("read %d bytes of a 32 MiB body, want at most %d", got, c.wantRead)
			}
		})
	}
	body := &countingReader{r: strings.NewReader(`{"a":1}`)}
	ev, release, err := m.readEvent(context.Background(), body, -1, maxKiB)
	release()
	if err != nil || string(ev) != `{"a":1}` {
		t.Fatalf("a small event: %q, %v", ev, err)
	}
	if m.bodies.free != 1<<20 {
		t.Errorf("budget not given back: %d free", m.bodies.free)
	}
	// An event of unknown length read whole keeps only its own buffer
	// reserved while its request runs, not the whole limit.
	ev, release, err = m.readEvent(context.Background(), strings.NewReader(`{}`), -1, 512)
	if err != nil || string(ev) != `{}` {
		t.Fatalf("%q, %v", ev, err)
	}
	if held := 1<<20 - m.bodies.free; held != int64(cap(ev)) {
		t.Errorf("a 2-byte event holds %d bytes of the budget, want its buffer's %d", held, cap(ev))
	}
	release()
	if m.bodies.free != 1<<20 {
		t.Errorf("budget not given back: %d free", m.bodies.free)
	}
}

// blockingReader blocks its first Read until release is closed.
type blockingReader struct {
	started chan struct{}
	release chan struct{}
	read    atomic.Bool
}

func (b *blockingReader) Read(p []byte) (int, error) {
	if !b.read.Swap(true) {
		close(b.started)
	}
	<-b.release
	return 0, io.EOF
}

// Events being read take room in the daemon's body budget: with room for
// two events at the limit, a third is not read until one is done.
func TestReadEventBoundsConcurrentBodies(t *testing.T) {
	const maxKiB = 4
	m := testManager(2 * maxKiB << 10)
	var readers [2]*blockingReader
	done := make(chan error, 2)
	for i := range readers {
		readers[i] = &blockingReader{started: make(chan struct{}), release: make(chan struct{})}
		go func() {
			_, release, err := m.readEvent(context.Background(), readers[i], -1, maxKiB)
			release()
			done <- err
		}()
		<-readers[i].started
	}
	third := &countingReader{r: strings.NewReader("{}")}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the budget is full: readEvent must wait, and so fail with ctx's error
	if _, release, err := m.readEvent(ctx, third, -1, maxKiB); !errors.Is(err, context.Canceled) {
		release()
		t.Fatalf("third body with a full budget: %v, want context.Canceled", err)
	}
	if third.n.Load() != 0 {
		t.Errorf("the third body was read (%d bytes) while the budget was full", third.n.Load())
	}
	close(readers[0].release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ev, release, err := m.readEvent(context.Background(), third, 2, maxKiB)
	release()
	if err != nil || string(ev) != "{}" {
		t.Fatalf("after room was freed: %q, %v", ev, err)
	}
	close(readers[1].release)
	<-done
}

func TestCheckEvent(t *testing.T) {
	for _, c := range []struct{ event, want string }{
		{"\"\xff\xfe\"", "event: is not valid UTF-8"},
		{"{", "event: is not valid JSON"},
	} {
		if err := checkEvent([]byte(c.event)); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("checkEvent(%q) = %v, want %q", c.event, err, c.want)
		}
	}
	if err := checkEvent([]byte(`{"ok":"é"}`)); err != nil {
		t.Error(err)
	}
}

// TestJSONDepth: brackets count outside strings only (an escaped quote does not end one).
func TestJSONDepth(t *testing.T) {
	for _, c := range []struct {
		event string
		want  int
	}{
		{`{}`, 1}, {`1`, 0}, {`[[1],[[2]]]`, 3}, {`{"a":"[[[[\"{{"}`, 1}, {`["\\",[]]`, 2},
		{strings.Repeat("[", 100000) + strings.Repeat("]", 100000), 100000},
	} {
		if got := jsonDepth([]byte(c.event)); got != c.want {
			t.Errorf("jsonDepth(%.40q) = %d, want %d", c.event, got, c.want)
		}
	}
}
