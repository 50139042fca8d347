package controller

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
)

// Creates (and a warm claim's fork) outside the reconcile workers.
//
// A create or fork on a node agent may take up to createTimeout (a gVisor start, a restore and
// a reseal; a hung node: the whole bound). Run inside a reconcile it would hold one of the
// reconcileWorkers that long, and four Sandboxes on one hung node would stall every
// Sandbox's reconcile. So the reconcile starts the call as a createOp, a goroutine of its own
// bounded by createTimeout, and waits for it at most createInlineWait: a quick create is
// recorded in the same pass; a slow one leaves the worker free (the Sandbox says Creating),
// and its end requeues the Sandbox (SandboxReconciler.wake), whose next pass records the
// outcome. One op at most per Sandbox (by UID); a Sandbox deleted while its op runs waits for
// the op before removing what it made.

// createInlineWait is how long a reconcile waits for the create it started before letting
// the worker go.
const createInlineWait = 2 * time.Second

// outcome records what a create or fork did into sb's status, in the reconcile that learns of
// it (ctx is that reconcile's: granting the sandbox's access Secret writes to the API server).
type outcome func(ctx context.Context, sb *agentsv1.Sandbox) (ctrl.Result, error)

// createOp is one create or fork under way for a Sandbox.
type createOp struct {
	done  chan struct{} // closed when apply is set
	apply outcome
}

// createOps tracks the createOps by Sandbox UID.
type createOps struct {
	mu  sync.Mutex // guards ops
	ops map[types.UID]*createOp
}

// get returns sb's op, if any.
func (c *createOps) get(uid types.UID) *createOp {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops[uid]
}

// forget drops sb's op.
func (c *createOps) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.ops, uid)
}

// start runs call for sb in a goroutine of its own, with a context detached from the
// reconcile's and bounded by createTimeout; call returns how to record its outcome on the
// Sandbox (applied by a later pass, on the Sandbox as it is then). wake, if not nil, is told
// when it ends.
func (c *createOps) start(ctx context.Context, sb *agentsv1.Sandbox, wake chan<- event.GenericEvent,
	call func(ctx context.Context) outcome) *createOp {
	op := &createOp{done: make(chan struct{})}
	c.mu.Lock()
	if c.ops == nil {
		c.ops = map[types.UID]*createOp{}
	}
	c.ops[sb.UID] = op
	c.mu.Unlock()
	key := sb.DeepCopy()
	go func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
		defer cancel()
		op.apply = call(cctx)
		close(op.done)
		if wake != nil {
			select {
			case wake <- event.GenericEvent{Object: key}:
			case <-time.After(createTimeout): // nobody listens (the manager stopped)
			}
		}
	}()
	return op
}

// finish waits up to wait for op; it reports whether op ended, and then applies its outcome to
// sb and forgets it.
func (c *createOps) finish(ctx context.Context, op *createOp, sb *agentsv1.Sandbox, wait time.Duration) (bool, ctrl.Result, error) {
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
	default:
		return false, ctrl.Result{}, nil
	}
	c.forget(sb.UID)
	res, err := op.apply(ctx, sb)
	return true, res, err
}

// runCreate starts call for sb (or finds it started by an earlier pass) and returns what to
// record: the outcome if the call ended within createInlineWait, else Creating and a requeue
// (the call's end also requeues sb through r.wake).
func (r *SandboxReconciler) runCreate(ctx context.Context, sb *agentsv1.Sandbox, node string,
	call func(ctx context.Context) outcome) (ctrl.Result, error) {
	op := r.ops.get(sb.UID)
	if op == nil {
		op = r.ops.start(ctx, sb, r.wake, call)
	}
	if ended, res, err := r.ops.finish(ctx, op, sb, createInlineWait); ended {
		return res, err
	}
	ready(sb, false, agentsv1.ReasonCreating, "creating the sandbox on node "+node+" (the agent has not answered yet)")
	return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
}

// opRunning reports whether a create or fork for sb is under way.
func (r *SandboxReconciler) opRunning(sb *agentsv1.Sandbox) bool {
	op := r.ops.get(sb.UID)
	if op == nil {
		return false
	}
	select {
	case <-op.done:
		r.ops.forget(sb.UID) // ended: its outcome no longer matters to a deleted Sandbox
		return false
	default:
		return true
	}
}
