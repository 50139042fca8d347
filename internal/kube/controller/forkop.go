package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
)

// A SandboxFork's fork outside the reconcile workers, as sandboxcreate.go does for creates.
//
// A fork call takes up to createTimeout; a cross-node fork copies an image for up to
// CopyTimeout (15 min) first. Run inside a reconcile, a few of them would hold every
// SandboxFork worker and stall every namespace's forks. So the reconcile starts the fork as an
// op (offworker.go), a goroutine of its own (detached from the reconcile, bounded by forkOpTimeout) working
// on a copy of the SandboxFork, and waits for it at most createInlineWait: a quick fork is
// recorded in the same pass; a slow one leaves the worker (a cross-node copy shows
// Complete=False reason Copying, written by the op when the copy starts), and its end requeues
// the SandboxFork (ForkReconciler.wake), whose next pass writes the status the op computed and
// creates the copies' Sandboxes. One op at most per SandboxFork (by UID). A SandboxFork deleted
// while its op runs cancels it and waits for it to end; what it made and nobody recorded is
// removed (undo).

// forkOpTimeout bounds a fork op: a checkpoint, the copy and the restores.
const forkOpTimeout = CopyTimeout + 2*createTimeout

// forkResult is what a fork op computed: the copy of the SandboxFork it worked on (its status
// is the outcome), and the reconcile result and error of that work.
type forkResult struct {
	f   *zygov1.SandboxFork
	res ctrl.Result
	err error
}

// forkOps tracks the forks under way, by SandboxFork UID (offworker.go).
type forkOps = bgOps[forkResult]

// startFork runs r.fork on a copy of f in a goroutine of its own.
func (r *ForkReconciler) startFork(ctx context.Context, f *zygov1.SandboxFork) *bgOp[forkResult] {
	work := f.DeepCopy()
	return r.ops.start(ctx, f.UID, f.DeepCopy(), forkOpTimeout, r.wake, func(ctx context.Context) forkResult {
		res, err := r.fork(ctx, work)
		return forkResult{f: work, res: res, err: err}
	})
}

// runFork starts f's fork (or finds it started by an earlier pass). Once it has ended it
// writes its outcome into f's status and creates the copies' Sandboxes; until then it
// requeues f.
func (r *ForkReconciler) runFork(ctx context.Context, f *zygov1.SandboxFork) (ctrl.Result, error) {
	op := r.ops.get(f.UID)
	if op == nil {
		op = r.startFork(ctx, f)
	}
	if !op.ended(createInlineWait) {
		return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
	}
	r.ops.forget(f.UID)
	before := f.DeepCopy()
	f.Status = *op.result.f.Status.DeepCopy()
	if err := r.Client.Status().Patch(ctx, f, client.MergeFrom(before)); err != nil {
		// The copies run and are not recorded: remove them rather than leave them behind.
		return ctrl.Result{}, errors.Join(op.result.err, fmt.Errorf("writing the status: %w", err), r.undo(ctx, op.result.f))
	}
	if op.result.err != nil || f.Status.CheckpointID == "" {
		return op.result.res, op.result.err
	}
	return op.result.res, r.ensureChildren(ctx, f)
}

// stopFork cancels f's fork, if one runs. It reports whether f must wait for it to end;
// once ended, what it made is removed (f is being deleted: nothing will record it).
func (r *ForkReconciler) stopFork(ctx context.Context, f *zygov1.SandboxFork) (bool, error) {
	op := r.ops.get(f.UID)
	if op == nil {
		return false, nil
	}
	op.cancel()
	if !op.ended(0) {
		return true, nil
	}
	r.ops.forget(f.UID)
	if f.Status.CheckpointID != "" {
		return false, nil // recorded: the deletion removes it as any fork's
	}
	return false, r.undo(ctx, op.result.f)
}
