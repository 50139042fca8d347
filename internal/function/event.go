package function

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"unicode/utf8"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// byteBudget is a counting semaphore of bytes: the memory that events being
// read, or held by their in-flight requests, may take together. Waiters
// are woken together and re-check; a large reservation may wait while
// smaller ones pass.
type byteBudget struct {
	mu   sync.Mutex // guards free and wake
	free int64
	wake chan struct{} // closed and replaced on every release
}

func newByteBudget(total int64) *byteBudget {
	return &byteBudget{free: total, wake: make(chan struct{})}
}

// acquire reserves n bytes, waiting until they are free or ctx ends (its
// error).
func (b *byteBudget) acquire(ctx context.Context, n int64) error {
	for {
		b.mu.Lock()
		if b.free >= n {
			b.free -= n
			b.mu.Unlock()
			return nil
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.free += n
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}

// readEvent reads an event of at most maxKiB KiB from body, whose length
// is size bytes (-1: unknown, as with a chunked upload). It reserves the
// memory in m's body budget before reading — size bytes, or the whole limit
// when size is unknown (then, once read, only what the event's buffer
// takes stays reserved) — and never reads more than one byte past the
// limit.
// The caller must call release once the event is no longer needed (even
// on error, release is valid). Errors: errdefs.ErrTooLarge (over the
// limit), errdefs.ErrInvalidArgument (the body could not be read), ctx's
// error while waiting for room.
func (m *Manager) readEvent(ctx context.Context, body io.Reader, size int64, maxKiB int) (event []byte, release func(), err error) {
	release = func() {}
	limit := int64(maxKiB) << 10
	tooLarge := func() error {
		return fmt.Errorf("%w: event: exceeds max_request_kib=%d", errdefs.ErrTooLarge, maxKiB)
	}
	if size > limit {
		return nil, release, tooLarge()
	}
	reserve := limit
	if size >= 0 {
		reserve = size
	}
	if err := m.bodies.acquire(ctx, reserve); err != nil {
		return nil, release, err
	}
	release = func() { m.bodies.release(reserve) }
	if size >= 0 {
		event = make([]byte, size)
		if _, err := io.ReadFull(body, event); err != nil {
			return nil, release, fmt.Errorf("%w: event: reading the body: %w", errdefs.ErrInvalidArgument, err)
		}
		return event, release, nil
	}
	event, err = readAtMost(body, limit)
	if errors.Is(err, errdefs.ErrTooLarge) {
		return nil, release, tooLarge()
	}
	if err != nil {
		return nil, release, fmt.Errorf("%w: event: reading the body: %w", errdefs.ErrInvalidArgument, err)
	}
	// Keep only what the event holds on to while its request runs.
	if held := int64(cap(event)); held < reserve {
		m.bodies.release(reserve - held)
		release = func() { m.bodies.release(held) }
	}
	return event, release, nil
}

// readAtMost reads r to EOF into a buffer that never grows past limit+1
// bytes; errdefs.ErrTooLarge when r holds more than limit.
func readAtMost(r io.Reader, limit int64) ([]byte, error) {
	buf := make([]byte, 0, min(limit+1, 64<<10))
	for {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(limit+1, 2*int64(cap(buf))))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, errdefs.ErrTooLarge
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// MaxEventDepth is the deepest nesting of arrays and objects an event may have: Go's
// encoding/json refuses deeper, and Python's and Node's parsers give up well before it
// (their own refusal is the runtime's bad_event).
const MaxEventDepth = 10000

// jsonDepth returns the deepest nesting of arrays and objects in event, counting brackets
// outside strings; it does not check that event is JSON (checkEvent does).
func jsonDepth(event []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range event {
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// checkEvent fails (errdefs.ErrInvalidArgument, naming event) for what no
// runtime could decode: invalid UTF-8 (Node would replace it silently,
// Python would refuse it) and text that is not JSON. What only a runtime's
// own parser refuses (nesting too deep for it, an integer too long for
// Python) the agent reports as a rejected event (agentproc.FailBadEvent).
func checkEvent(event []byte) error {
	if !utf8.Valid(event) {
		return fmt.Errorf("%w: event: is not valid UTF-8", errdefs.ErrInvalidArgument)
	}
	if !json.Valid(event) {
		return fmt.Errorf("%w: event: is not valid JSON", errdefs.ErrInvalidArgument)
	}
	return nil
}
