package function

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// QueueFullError is Invoke's answer when a function has every concurrency
// slot taken and its queue (manifest key queue) full. It unwraps to
// errdefs.ErrTooManyRequests; RetryAfter is the API's Retry-After.
type QueueFullError struct {
	Function    string
	Concurrency int
	Queue       int
	After       time.Duration // whole seconds, at least one
}

func (e *QueueFullError) Error() string {
	if e.Queue == 0 {
		return fmt.Sprintf("function %q is at its concurrency (%d) and has no queue (queue = 0); retry after %s",
			e.Function, e.Concurrency, e.After)
	}
	return fmt.Sprintf("function %q is at its concurrency (%d) and its queue (%d) is full; retry after %s",
		e.Function, e.Concurrency, e.Queue, e.After)
}

func (e *QueueFullError) Unwrap() error { return errdefs.ErrTooManyRequests }

// RetryAfter says when a retry may find room.
func (e *QueueFullError) RetryAfter() time.Duration { return e.After }

// admit takes one of d's concurrency slots: at once when one is free, else
// after waiting in d's queue (bounded by ctx). It fails with a
// *QueueFullError when the queue is full too, errRetired when d is halted
// first, and ctx.Err() when ctx ends first.
func (d *deployment) admit(ctx context.Context) error {
	select {
	case d.sem <- struct{}{}: // a free slot: no wait
		return d.checkSlot()
	default:
	}
	limit := int64(d.manifest.QueueLen())
	if d.queued.Add(1) > limit {
		d.queued.Add(-1)
		return &QueueFullError{Function: d.name, Concurrency: d.manifest.Concurrency, Queue: int(limit), After: d.retryAfter()}
	}
	defer d.queued.Add(-1)
	return d.acquireSlot(ctx)
}

// retryAfter estimates when a slot frees for one more request: the mean
// run time (recent requests weigh most) times the requests ahead of it per
// slot, in whole seconds rounded up, between 1 s and timeout_ms.
func (d *deployment) retryAfter() time.Duration {
	mean := time.Duration(d.meanRunNs.Load())
	est := mean * time.Duration(d.queued.Load()+1) / time.Duration(d.manifest.Concurrency)
	est = min(est, time.Duration(d.manifest.Limits.TimeoutMs)*time.Millisecond)
	return max(time.Second, (est + time.Second - 1).Truncate(time.Second))
}

// observeRun folds one request's run time into d's mean (an exponentially
// weighted one, 1/8 for the newest).
func (d *deployment) observeRun(took time.Duration) {
	for {
		old := d.meanRunNs.Load()
		next := int64(took)
		if old != 0 {
			next = old + (int64(took)-old)/8
		}
		if d.meanRunNs.CompareAndSwap(old, next) {
			return
		}
	}
}

// waitFailed turns the end of a request's wait for a slot or a ready
// runtime into its answer: the caller's own cancellation as it is; the
// wait's deadline (the request's timeout_ms, which time waiting counts
// against) as errdefs.ErrUnavailable for a function still deploying or
// (re)starting, else errdefs.ErrDeadlineExceeded; anything else as it is.
func (d *deployment) waitFailed(caller context.Context, err error) error {
	if caller.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	timeout := d.manifest.Limits.TimeoutMs
	d.mu.Lock()
	state, first := d.state, d.firstDeploy
	d.mu.Unlock()
	switch {
	case state == StateStarting && first:
		return fmt.Errorf("%w: function %q is still deploying (waited its timeout_ms=%d)", errdefs.ErrUnavailable, d.name, timeout)
	case state != StateReady:
		return fmt.Errorf("%w: function %q is %s (waited its timeout_ms=%d)", errdefs.ErrUnavailable, d.name, state, timeout)
	}
	return fmt.Errorf("%w: function %q: no concurrency slot came free within its timeout_ms=%d (concurrency %d)",
		errdefs.ErrDeadlineExceeded, d.name, timeout, d.manifest.Concurrency)
}
