package envd

import (
	"errors"
	"fmt"
	"sync"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// maxWatches bounds the watches (streaming WatchDir and polling CreateWatcher together) the
// envd API holds open on one sandbox. Each holds one of the guest's long-lived streams
// (guest.MaxOpenStreams, 64, shared with process streams): this cap keeps three quarters of
// them for commands, so that abandoned watchers never lock a sandbox out of commands.
const maxWatches = 16

// streams counts, per sandbox, the long-lived guest streams the envd API holds open: those
// of process calls (Start, Connect) and of watches. It is safe for concurrent use.
type streams struct {
	mu   sync.Mutex
	open map[string]*streamCount // sandbox id -> counts; guarded by mu
}

type streamCount struct {
	procs, watchStreams, pollers int
}

func newStreams() *streams { return &streams{open: map[string]*streamCount{}} }

// streamKind names what a stream is for.
type streamKind int

const (
	procStream   streamKind = iota // Start, Connect: the SDK's commands.run and its handles
	watchStream                    // WatchDir: the SDK's watchDir
	pollerStream                   // CreateWatcher: a polling watcher
)

// acquire counts one stream of kind on sandbox id; a watch past maxWatches is refused with
// errdefs.ErrTooManyRequests, saying what is open and how to free it. release (idempotent)
// uncounts it.
func (s *streams) acquire(id string, kind streamKind) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.open[id]
	if c == nil {
		c = &streamCount{}
		s.open[id] = c
	}
	if kind != procStream && c.watchStreams+c.pollers >= maxWatches {
		return nil, fmt.Errorf("sandbox %s has %d watches open (%d watchDir streams, %d polling watchers), the most at once (commands have their own budget): stop a watchDir handle, or RemoveWatcher a polling one (one nobody polls ends after %s): %w",
			id, c.watchStreams+c.pollers, c.watchStreams, c.pollers, watcherIdle, errdefs.ErrTooManyRequests)
	}
	c.add(kind, 1)
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			c.add(kind, -1)
			if *c == (streamCount{}) && s.open[id] == c {
				delete(s.open, id)
			}
		})
	}, nil
}

func (c *streamCount) add(kind streamKind, n int) {
	switch kind {
	case procStream:
		c.procs += n
	case watchStream:
		c.watchStreams += n
	case pollerStream:
		c.pollers += n
	}
}

// explain adds to an error of the guest's stream budget (errdefs.ErrTooManyRequests) what
// the envd API holds open on sandbox id and how to free it; other errors are returned as
// they are.
func (s *streams) explain(id string, err error) error {
	if !errors.Is(err, errdefs.ErrTooManyRequests) {
		return err
	}
	s.mu.Lock()
	var c streamCount
	if p := s.open[id]; p != nil {
		c = *p
	}
	s.mu.Unlock()
	return fmt.Errorf("%w (open through the E2B endpoint: %d process streams, the SDK's commands.run calls and the handles of background commands it keeps: kill a command or disconnect() its handle; %d watches, at most %d)",
		err, c.procs, c.watchStreams+c.pollers, maxWatches)
}
