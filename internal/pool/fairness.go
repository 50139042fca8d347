package pool

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// admission is a pool's fairness: at most perTenant requests of one tenant
// run at once and at most queue more wait; beyond that a request is
// refused at once (TooManyRequestsError). Admitted requests then share the
// pool's own concurrency (a FIFO of waiters on one channel), so a tenant
// holding all its slots leaves the rest of the pool to the others.
type admission struct {
	perTenant, queue int
	retryAfter       time.Duration
	global           chan struct{} // the pool's concurrency

	mu      sync.Mutex // guards tenants and each entry's waiting
	tenants map[string]*tenantSlots
}

// tenantSlots is one tenant's share: sem holds a token per running request.
// An entry with no token and no waiter is deleted.
type tenantSlots struct {
	sem     chan struct{}
	waiting int
}

func newAdmission(m *Manifest) *admission {
	return &admission{perTenant: m.Tenant.Concurrency, queue: m.Tenant.Queue,
		retryAfter: time.Duration(max(1000, m.Limits.TimeoutMs/2)) * time.Millisecond,
		global:     make(chan struct{}, m.Concurrency), tenants: map[string]*tenantSlots{}}
}

// TooManyRequestsError is a request refused because its tenant holds all
// its slots and queue places. It wraps errdefs.ErrTooManyRequests.
type TooManyRequestsError struct {
	Tenant       string
	Running, Cap int
	Queue        int
	After        time.Duration // when a retry may succeed (the API's Retry-After)
}

func (e *TooManyRequestsError) Error() string {
	return fmt.Sprintf("tenant %q has %d requests running (tenant.concurrency = %d) and %d waiting (tenant.queue = %d): retry later",
		e.Tenant, e.Running, e.Cap, e.Queue, e.Queue)
}

func (e *TooManyRequestsError) Unwrap() error { return errdefs.ErrTooManyRequests }

// RetryAfter is how long the caller should wait before retrying.
func (e *TooManyRequestsError) RetryAfter() time.Duration { return e.After }

// acquire admits one request of tenant, waiting (ctx) for its tenant's slot
// and then a slot of the pool; the returned release gives both back (call
// it once). Errors: *TooManyRequestsError, or ctx's.
func (a *admission) acquire(ctx context.Context, tenant string) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a.mu.Lock()
	ts := a.tenants[tenant]
	if ts == nil {
		ts = &tenantSlots{sem: make(chan struct{}, a.perTenant)}
		a.tenants[tenant] = ts
	}
	select {
	case ts.sem <- struct{}{}:
		a.mu.Unlock()
	default:
		if ts.waiting >= a.queue {
			a.mu.Unlock()
			return nil, &TooManyRequestsError{Tenant: tenant, Running: a.perTenant, Cap: a.perTenant, Queue: a.queue, After: a.retryAfter}
		}
		ts.waiting++
		a.mu.Unlock()
		select {
		case ts.sem <- struct{}{}:
			a.mu.Lock()
			ts.waiting--
			a.mu.Unlock()
		case <-ctx.Done():
			a.mu.Lock()
			ts.waiting--
			a.dropLocked(tenant, ts)
			a.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	leaveTenant := func() {
		a.mu.Lock()
		<-ts.sem
		a.dropLocked(tenant, ts)
		a.mu.Unlock()
	}
	select {
	case a.global <- struct{}{}:
	case <-ctx.Done():
		leaveTenant()
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-a.global
			leaveTenant()
		})
	}, nil
}

// dropLocked forgets ts when nothing holds or waits for it.
func (a *admission) dropLocked(tenant string, ts *tenantSlots) {
	if len(ts.sem) == 0 && ts.waiting == 0 && a.tenants[tenant] == ts {
		delete(a.tenants, tenant)
	}
}

// stats returns the requests running and waiting now, all tenants.
func (a *admission) stats() (running, waiting, tenants int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ts := range a.tenants {
		running += len(ts.sem)
		waiting += ts.waiting
	}
	return running, waiting, len(a.tenants)
}
