package sandboxtest

import (
	"context"
	"errors"
	"sync"

	"github.com/zygo-run/zygo/internal/sandbox"
)

// ErrInjected is the error FaultyRegistry's failing writes return.
var ErrInjected = errors.New("injected: disk I/O error")

// FaultyRegistry is a sandbox.MemRegistry whose writes fail on demand, for tests of what the
// Manager leaves behind when the store fails. Safe for concurrent use. It lives here, in test
// support, so that no production build carries it (depguard refuses sandboxtest outside
// _test.go files).
type FaultyRegistry struct {
	*sandbox.MemRegistry
	mu                sync.Mutex // guards the fields below
	failPutCheckpoint bool
	failPut           sandbox.State
	// blockDelete, when set, holds the next DeleteCheckpoint: it closes entered and waits for
	// release.
	blockDelete *block
}

type block struct{ entered, release chan struct{} }

// NewFaultyRegistry returns an empty FaultyRegistry that fails nothing yet.
func NewFaultyRegistry() *FaultyRegistry {
	return &FaultyRegistry{MemRegistry: sandbox.NewMemRegistry()}
}

// FailNextPutCheckpoint makes the next PutCheckpoint return ErrInjected.
func (r *FaultyRegistry) FailNextPutCheckpoint() {
	r.mu.Lock()
	r.failPutCheckpoint = true
	r.mu.Unlock()
}

// FailNextPutSandbox makes the next PutSandbox of a record in state st return ErrInjected.
func (r *FaultyRegistry) FailNextPutSandbox(st sandbox.State) {
	r.mu.Lock()
	r.failPut = st
	r.mu.Unlock()
}

// PutCheckpoint implements sandbox.Registry.
func (r *FaultyRegistry) PutCheckpoint(ctx context.Context, rec sandbox.CheckpointRecord) error {
	r.mu.Lock()
	fail := r.failPutCheckpoint
	r.failPutCheckpoint = false
	r.mu.Unlock()
	if fail {
		return ErrInjected
	}
	return r.MemRegistry.PutCheckpoint(ctx, rec)
}

// PutSandbox implements sandbox.Registry.
func (r *FaultyRegistry) PutSandbox(ctx context.Context, rec sandbox.SandboxRecord) error {
	r.mu.Lock()
	fail := r.failPut != "" && rec.State == r.failPut
	if fail {
		r.failPut = ""
	}
	r.mu.Unlock()
	if fail {
		return ErrInjected
	}
	return r.MemRegistry.PutSandbox(ctx, rec)
}

// BlockNextDeleteCheckpoint holds the next DeleteCheckpoint until release is closed; entered
// is closed once it is held. It returns entered.
func (r *FaultyRegistry) BlockNextDeleteCheckpoint(release chan struct{}) (entered <-chan struct{}) {
	b := &block{entered: make(chan struct{}), release: release}
	r.mu.Lock()
	r.blockDelete = b
	r.mu.Unlock()
	return b.entered
}

// DeleteCheckpoint implements sandbox.Registry.
func (r *FaultyRegistry) DeleteCheckpoint(ctx context.Context, id string) error {
	r.mu.Lock()
	b := r.blockDelete
	r.blockDelete = nil
	r.mu.Unlock()
	if b != nil {
		close(b.entered)
		<-b.release
	}
	return r.MemRegistry.DeleteCheckpoint(ctx, id)
}
