package envd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	pb "github.com/zygo-run/zygo/internal/e2b/envd/spec/filesystem"
	"github.com/zygo-run/zygo/internal/errdefs"
)

const (
	// maxWatcherEvents bounds the events a watcher keeps between two polls; later ones are
	// dropped (and logged) until the next poll.
	maxWatcherEvents = 10000
	// watcherIdle is how long a watcher nobody polls lives: an SDK that went away without
	// RemoveWatcher does not hold one of the sandbox's maxWatches for long.
	watcherIdle = 3 * time.Minute
)

// watchers holds the polling watchers (CreateWatcher) of every sandbox, counted in the
// Server's streams (at most maxWatches watches a sandbox, with WatchDir's). Each runs a
// goroutine that collects its events until it is removed, idle for watcherIdle, its watch
// ends, or the Server closes.
type watchers struct {
	ctx context.Context // the Server's: ends every watch
	log *slog.Logger

	mu   sync.Mutex
	byID map[string]*watcher // guarded by mu
}

// watcher is one polling watch of a directory of sandbox.
type watcher struct {
	sandbox string
	dir     string
	cancel  context.CancelFunc // ends the watch and releases its count
	release func()             // uncounts the watch in the Server's streams; idempotent
	idle    *time.Timer        // removes the watcher; reset by each poll

	mu      sync.Mutex
	events  []*pb.FilesystemEvent // guarded by mu; at most maxWatcherEvents
	dropped int                   // guarded by mu; events past the bound since the last poll
	ended   bool                  // guarded by mu; the watch ended (no more events come)
}

func newWatchers(ctx context.Context, log *slog.Logger) *watchers {
	return &watchers{ctx: ctx, log: log, byID: map[string]*watcher{}}
}

// create starts a watcher of dir in sandbox id and returns its id. The watch is bound to
// the Server, not to the call that creates it.
func (ws *watchers) create(s *Server, id, dir string, recursive, withEntry bool) (string, error) {
	release, err := s.streams.acquire(id, pollerStream)
	if err != nil {
		return "", err
	}
	wctx, cancel := context.WithCancel(ws.ctx)
	events, err := s.sb.WatchDir(wctx, id, dir, recursive)
	if err != nil {
		cancel()
		release()
		return "", s.streams.explain(id, err)
	}
	wid := newWatcherID()
	w := &watcher{sandbox: id, dir: dir, cancel: func() { cancel(); release() }, release: release}
	w.idle = time.AfterFunc(watcherIdle, func() { _ = ws.remove(id, wid) })
	ws.mu.Lock()
	ws.byID[wid] = w
	ws.mu.Unlock()
	go w.collect(wctx, s, events, withEntry)
	return wid, nil
}

// collect keeps events until the channel closes.
func (w *watcher) collect(ctx context.Context, s *Server, events <-chan FsEvent, withEntry bool) {
	for ev := range events {
		fe := s.fsEvent(ctx, w.sandbox, w.dir, ev, withEntry)
		w.mu.Lock()
		if len(w.events) < maxWatcherEvents {
			w.events = append(w.events, fe)
		} else {
			w.dropped++
		}
		w.mu.Unlock()
	}
	w.release() // the guest's stream is gone; the watcher stays until its last events are taken
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
}

// take returns and forgets watcher wid's events. A watcher whose watch ended is removed
// once its last events are taken; after that its id is not found.
func (ws *watchers) take(id, wid string) ([]*pb.FilesystemEvent, error) {
	w, err := ws.get(id, wid)
	if err != nil {
		return nil, err
	}
	w.idle.Reset(watcherIdle)
	w.mu.Lock()
	events, dropped, ended := w.events, w.dropped, w.ended
	w.events, w.dropped = nil, 0
	w.mu.Unlock()
	if dropped > 0 {
		ws.log.Warn("envd: a watcher dropped events over its bound between two polls", "sandbox_id", id, "watcher", wid, "dropped", dropped, "bound", maxWatcherEvents)
	}
	if ended && len(events) == 0 {
		_ = ws.remove(id, wid)
		return nil, fmt.Errorf("watcher %s: its watch of %s ended (the directory was removed, or the sandbox stopped): %w", wid, w.dir, errdefs.ErrNotFound)
	}
	return events, nil
}

// remove stops watcher wid of sandbox id.
func (ws *watchers) remove(id, wid string) error {
	ws.mu.Lock()
	w, ok := ws.byID[wid]
	if ok && w.sandbox == id {
		delete(ws.byID, wid)
	}
	ws.mu.Unlock()
	if !ok || w.sandbox != id {
		return notFoundf("watcher %q", wid)
	}
	w.idle.Stop()
	w.cancel()
	return nil
}

// get returns watcher wid, which must belong to sandbox id.
func (ws *watchers) get(id, wid string) (*watcher, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w, ok := ws.byID[wid]
	if !ok || w.sandbox != id {
		return nil, notFoundf("watcher %q", wid)
	}
	return w, nil
}

// forget stops every watcher of sandbox id.
func (ws *watchers) forget(id string) {
	ws.mu.Lock()
	var gone []*watcher
	for wid, w := range ws.byID {
		if w.sandbox == id {
			gone = append(gone, w)
			delete(ws.byID, wid)
		}
	}
	ws.mu.Unlock()
	for _, w := range gone {
		w.idle.Stop()
		w.cancel()
	}
}

// closeAll stops every watcher.
func (ws *watchers) closeAll() {
	ws.mu.Lock()
	all := ws.byID
	ws.byID = map[string]*watcher{}
	ws.mu.Unlock()
	for _, w := range all {
		w.idle.Stop()
		w.cancel()
	}
}

// newWatcherID is a random watcher id (128 bits, hex).
func newWatcherID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
