package controller

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
)

// Creates (and a warm claim's fork) outside the reconcile workers.
//
// A create or fork on a node agent may take up to createTimeout (a gVisor start, a restore and
// a reseal; a hung node: the whole bound). Run inside a reconcile it would hold one of the
// reconcileWorkers that long, and four Sandboxes on one hung node would stall every
// Sandbox's reconcile. So the reconcile starts the call as an op (offworker.go), a goroutine of its own
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

// createOps tracks the creates and forks under way, by Sandbox UID (offworker.go).
type createOps = bgOps[outcome]

// finish waits up to wait for op; it reports whether op ended, and then applies its outcome to
// sb and forgets it.
func (r *SandboxReconciler) finish(ctx context.Context, op *bgOp[outcome], sb *agentsv1.Sandbox, wait time.Duration) (bool, ctrl.Result, error) {
	if !op.ended(wait) {
		return false, ctrl.Result{}, nil
	}
	r.ops.forget(sb.UID)
	res, err := op.result(ctx, sb)
	return true, res, err
}

// runCreate starts call for sb (or finds it started by an earlier pass) and returns what to
// record: the outcome if the call ended within createInlineWait, else Creating and a requeue
// (the call's end also requeues sb through r.wake).
func (r *SandboxReconciler) runCreate(ctx context.Context, sb *agentsv1.Sandbox, node string,
	call func(ctx context.Context) outcome) (ctrl.Result, error) {
	op := r.ops.get(sb.UID)
	if op == nil {
		op = r.ops.start(ctx, sb.UID, sb.DeepCopy(), createTimeout, r.wake, call)
	}
	if ended, res, err := r.finish(ctx, op, sb, createInlineWait); ended {
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
	if op.ended(0) {
		r.ops.forget(sb.UID) // ended: its outcome no longer matters to a deleted Sandbox
		return false
	}
	return true
}
