package controller

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// bgOp is one agent call run off the reconcile workers for one object (sandboxcreate.go,
// forkop.go): a goroutine of its own, detached from the reconcile that started it and bounded
// by its own timeout. result is set before done is closed and read only after.
type bgOp[T any] struct {
	done   chan struct{}
	cancel context.CancelFunc // cancels the call's context
	result T
}

// ended reports whether op has ended, waiting for it at most wait.
func (op *bgOp[T]) ended(wait time.Duration) bool {
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-op.done:
		case <-t.C:
		}
	}
	select {
	case <-op.done:
		return true
	default:
		return false
	}
}

// bgOps tracks the bgOps under way, one at most per object UID. The zero value is ready.
type bgOps[T any] struct {
	mu  sync.Mutex // guards ops
	ops map[types.UID]*bgOp[T]
}

// get returns uid's op, if any.
func (c *bgOps[T]) get(uid types.UID) *bgOp[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops[uid]
}

// forget drops uid's op.
func (c *bgOps[T]) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.ops, uid)
}

// start runs call in a goroutine of its own for uid, with a context detached from ctx and
// bounded by timeout, and records it as uid's op. When call returns, wake (if not nil) is
// told key, so that the object's next reconcile reads the result; a wake nobody takes within
// createTimeout (the manager stopped) is dropped.
func (c *bgOps[T]) start(ctx context.Context, uid types.UID, key client.Object, timeout time.Duration,
	wake chan<- event.GenericEvent, call func(ctx context.Context) T) *bgOp[T] {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	op := &bgOp[T]{done: make(chan struct{}), cancel: cancel}
	c.mu.Lock()
	if c.ops == nil {
		c.ops = map[types.UID]*bgOp[T]{}
	}
	c.ops[uid] = op
	c.mu.Unlock()
	go func() {
		defer cancel()
		op.result = call(cctx)
		close(op.done)
		if wake != nil {
			select {
			case wake <- event.GenericEvent{Object: key}:
			case <-time.After(createTimeout):
			}
		}
	}()
	return op
}
