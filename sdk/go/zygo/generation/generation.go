// Package generation tells Go code running inside a Zygo sandbox that it woke up in a new copy.
//
// Every copy of a sandbox (a fork child or a rollback) is resealed before Zygo hands it out: a
// new random 128-bit generation is published at /run/zygo/generation (32 hex digits) and the
// copy's identity at /run/zygo/identity.json. A process that was running when the checkpoint
// was taken wakes up in every copy with the same memory: the same math/rand states, the same
// cached tokens, the same leases. A Watcher notices the new generation and calls back once per
// copy, so the process can renew what it owns:
//
//	var mu sync.Mutex
//	rng := rand.New(rand.NewChaCha8(generation.Seed()))
//	w := generation.New(generation.Options{})
//	w.OnNew(func(generation.Event) { mu.Lock(); rng = rand.New(rand.NewChaCha8(generation.Seed())); mu.Unlock() })
//	go w.Run(ctx)
//	...
//	w.Check() // at the start of a request: callbacks that are due have run when it returns
//
// Latency: Run wakes on inotify events for the directory and polls every Options.Interval
// (100 ms) in any case, so a callback runs within about Interval of the generation being
// published. Check closes that window for code that calls it.
//
// What it cannot renew: the Go runtime's own generator behind the top-level functions of
// math/rand and math/rand/v2 (per-thread state in the runtime, with no reseed call; rand.Seed
// is a no-op since Go 1.24). Use a generator you own, as above, or crypto/rand, which asks the
// kernel on every call and differs in every copy. This package uses only the standard library.
package generation

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Defaults of Options.
const (
	DefaultDir      = "/run/zygo"
	DefaultInterval = 100 * time.Millisecond
)

// Identity is the copy's /run/zygo/identity.json.
type Identity struct {
	SandboxID    string    `json:"sandbox_id"`
	ParentID     string    `json:"parent_id,omitempty"`
	CheckpointID string    `json:"checkpoint_id,omitempty"`
	Generation   string    `json:"generation"`
	Hostname     string    `json:"hostname,omitempty"`
	ResumedAt    time.Time `json:"resumed_at"`
	// SuspendedNS is how long the copy spent as a checkpoint image, in nanoseconds. On gVisor
	// the monotonic clock already jumped forward by about as much (docs/sandboxes.md).
	SuspendedNS int64 `json:"suspended_ns"`
}

// Event is one new generation.
type Event struct {
	Generation string
	Identity   Identity // zero when identity.json could not be read
}

// Options configures a Watcher. Zero fields take the defaults.
type Options struct {
	Dir      string        // where generation and identity.json are [DefaultDir]
	Interval time.Duration // polling period [DefaultInterval]
}

// Current returns the generation published in dir ("" means DefaultDir). Outside a sandbox it
// returns an error wrapping fs.ErrNotExist.
func Current(dir string) (string, error) {
	if dir == "" {
		dir = DefaultDir
	}
	b, err := os.ReadFile(filepath.Join(dir, "generation"))
	if err != nil {
		return "", err
	}
	g := strings.TrimSpace(string(b))
	if g == "" {
		return "", fmt.Errorf("%s/generation is empty", dir)
	}
	return g, nil
}

// ReadIdentity returns the identity published in dir ("" means DefaultDir).
func ReadIdentity(dir string) (Identity, error) {
	if dir == "" {
		dir = DefaultDir
	}
	var id Identity
	b, err := os.ReadFile(filepath.Join(dir, "identity.json"))
	if err != nil {
		return id, err
	}
	if err := json.Unmarshal(b, &id); err != nil {
		return id, fmt.Errorf("decoding identity.json: %w", err)
	}
	return id, nil
}

// Seed returns 32 bytes from crypto/rand (the kernel, which differs in every copy), for
// seeding a generator you own: rand.NewChaCha8(generation.Seed()) or (*rand.ChaCha8).Seed.
// It panics only if crypto/rand fails, which the Go runtime treats as fatal anyway.
func Seed() [32]byte {
	var s [32]byte
	if _, err := rand.Read(s[:]); err != nil {
		panic(err)
	}
	return s
}

// Watcher calls its callbacks once for every new generation it observes. The generation
// current when New is called is the baseline: nothing runs for it. Safe for concurrent use.
type Watcher struct {
	dir      string
	interval time.Duration

	mu        sync.Mutex // guards seen and callbacks; held while callbacks run
	seen      string
	callbacks []func(Event)
}

// New returns a Watcher whose baseline is the generation current now. Make it before the
// checkpoint is taken.
func New(opts Options) *Watcher {
	if opts.Dir == "" {
		opts.Dir = DefaultDir
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	w := &Watcher{dir: opts.Dir, interval: opts.Interval}
	w.seen, _ = Current(opts.Dir)
	return w
}

// OnNew adds fn; callbacks run in the order they were added, in the goroutine of Run or of
// Check, never two at once. A callback must not call Check or OnNew.
func (w *Watcher) OnNew(fn func(Event)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.callbacks = append(w.callbacks, fn)
}

// Check runs the callbacks now if the generation changed since the last one seen, and reports
// whether it did. When Check returns, the callbacks of the current generation have run (here
// or in Run).
func (w *Watcher) Check() bool {
	g, err := Current(w.dir)
	if err != nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if g == w.seen {
		return false
	}
	w.seen = g
	ev := Event{Generation: g}
	ev.Identity, _ = ReadIdentity(w.dir)
	for _, fn := range w.callbacks {
		fn(ev)
	}
	return true
}

// Run watches until ctx ends, then returns nil.
func (w *Watcher) Run(ctx context.Context) error {
	events := watchDir(ctx, w.dir) // nil where inotify is not available
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		w.Check()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-events:
		}
	}
}

// OnNewGeneration makes a Watcher with default options, adds fn and runs it until ctx ends.
func OnNewGeneration(ctx context.Context, fn func(Event)) *Watcher {
	w := New(Options{})
	w.OnNew(fn)
	go w.Run(ctx)
	return w
}
