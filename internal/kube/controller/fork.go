package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/source"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// LabelFork marks a fork's copies with the SandboxFork's name (NameLabel). It only narrows a
// search: what is deleted with the fork is what it controls (metav1.IsControlledBy).
const LabelFork = "zygo.run/fork"

// ForkReconciler runs each SandboxFork once: one fork call on the source's node (or, for
// another spec.nodeName, a copy of the image to that node and one restore per copy there:
// crossnode.go), then one Sandbox object per copy that runs.
type ForkReconciler struct {
	Client client.Client
	Dialer Dialer

	ops  forkOps                 // forks under way (forkop.go)
	wake chan event.GenericEvent // requeues a SandboxFork whose op ended; nil without a manager
}

// forkChildName is the Sandbox name of a fork's i-th copy.
func forkChildName(fork string, i int) string { return fork + "-" + strconv.Itoa(i) }

// forkCopyName is the Zygo sandbox name of the i-th copy of SandboxFork uid on its node:
// "k8s-UID-i", deterministic (like nodeSandboxName), so a copy made and not recorded (the
// controller died before the status write) is found again by name: the fork's next try
// removes it (removeLeftovers), the node's collection removes it once the SandboxFork is
// gone, and a Sandbox's status can name only its own copy (notOwned). The copy's Sandbox
// object does not exist before the fork (its UID is not known), so the name is the fork's.
// At most "k8s-" + 36 + "-" + 2 digits: within a sandbox name's 63 characters.
func forkCopyName(uid types.UID, i int) string { return "k8s-" + string(uid) + "-" + strconv.Itoa(i) }

// forkCopyNames are the names of f's spec.count copies.
func forkCopyNames(f *zygov1.SandboxFork) []string {
	out := make([]string, f.Spec.Count)
	for i := range out {
		out[i] = forkCopyName(f.UID, i)
	}
	return out
}

// removeLeftovers removes, before f's fork runs on a, the copies an earlier try made under
// f's names and did not record (f.Status.CheckpointID is empty: nothing of them is
// recorded): otherwise the names would be in use and the fork refused.
func removeLeftovers(ctx context.Context, a Agent, f *zygov1.SandboxFork) error {
	cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	defer cancel()
	for _, name := range forkCopyNames(f) {
		rec, err := a.GetSandbox(cctx, name)
		if zygo.IsNotFound(err) {
			continue
		} else if err != nil {
			return fmt.Errorf("looking for an unrecorded copy %s: %w", name, err)
		}
		if rec.Name != name { // an id that looks like the name: not possible (ids are sb-…), but never remove another's
			continue
		}
		log.FromContext(ctx).Info("removing a copy an earlier try of this fork made and did not record", "sandbox", name, "sandbox_id", rec.ID)
		if err := a.RemoveSandbox(cctx, rec.ID); err != nil && !zygo.IsNotFound(err) {
			return fmt.Errorf("removing unrecorded copy %s: %w", name, err)
		}
	}
	return nil
}

// Reconcile forks, records the copies, or deletes them with the SandboxFork.
func (r *ForkReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var f zygov1.SandboxFork
	if err := r.Client.Get(ctx, req.NamespacedName, &f); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if f.DeletionTimestamp != nil {
		if wait, err := r.stopFork(ctx, &f); err != nil || wait {
			return ctrl.Result{RequeueAfter: time.Second}, err
		}
		var kids agentsv1.SandboxList
		if err := r.Client.List(ctx, &kids, client.InNamespace(f.Namespace), client.MatchingLabels{LabelFork: NameLabel(f.Name)}); err != nil {
			return ctrl.Result{}, fmt.Errorf("listing the copies: %w", err)
		}
		left := 0
		for i := range kids.Items {
			if !metav1.IsControlledBy(&kids.Items[i], &f) { // a label anyone may set names no copy
				continue
			}
			left++
			if kids.Items[i].DeletionTimestamp != nil {
				continue
			}
			if err := r.Client.Delete(ctx, &kids.Items[i]); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("deleting copy %s: %w", kids.Items[i].Name, err)
			}
		}
		if left > 0 {
			// The copies' finalizers check a copy is theirs against this fork's status
			// (notOwned): it stays until they are gone.
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		if wait, err := r.removeImage(ctx, &f); err != nil || wait > 0 { // the image it took or copied
			return ctrl.Result{RequeueAfter: wait}, err
		}
		if controllerutil.RemoveFinalizer(&f, Finalizer) {
			return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, &f))
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(&f, Finalizer) {
		if err := r.Client.Update(ctx, &f); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
	}
	if f.Status.CheckpointID != "" { // forked: make sure every running copy has its Sandbox
		return ctrl.Result{}, r.ensureChildren(ctx, &f)
	}
	if c := meta.FindStatusCondition(f.Status.Conditions, zygov1.ConditionComplete); c != nil && c.Reason == zygov1.ReasonCrossNode {
		return ctrl.Result{}, nil // the spec is immutable: it will not become possible
	}
	return r.runFork(ctx, &f) // forkop.go: outside the worker when slow
}

// fork makes the copies and records them in f.Status.
func (r *ForkReconciler) fork(ctx context.Context, f *zygov1.SandboxFork) (ctrl.Result, error) {
	done := func(ok bool, reason, msg string) {
		setCondition(&f.Status.Conditions, f.Generation, zygov1.ConditionComplete, ok, reason, msg)
	}
	var src agentsv1.Sandbox
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: f.Namespace, Name: f.Spec.SourceRef.Name}, &src); err != nil {
		if apierrors.IsNotFound(err) {
			done(false, zygov1.ReasonSourceNotFound, fmt.Sprintf("spec.sourceRef.name: Sandbox %s does not exist; nothing was made", f.Spec.SourceRef.Name))
			return ctrl.Result{RequeueAfter: ProbeEvery}, nil
		}
		return ctrl.Result{}, fmt.Errorf("reading the source: %w", err)
	}
	if !meta.IsStatusConditionTrue(src.Status.Conditions, agentsv1.ConditionReady) {
		done(false, zygov1.ReasonSourceNotReady, fmt.Sprintf("Sandbox %s is not Ready (%s); nothing was made", src.Name, conditionMessage(src.Status.Conditions, agentsv1.ConditionReady)))
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	nodeName := src.Status.NodeName
	from := ""
	if ref := f.Spec.CheckpointRef; ref != nil {
		var cp zygov1.Checkpoint
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: f.Namespace, Name: ref.Name}, &cp); err != nil || cp.Status.CheckpointID == "" {
			done(false, zygov1.ReasonSourceNotFound, fmt.Sprintf("spec.checkpointRef.name: Checkpoint %s does not exist or has no image yet; nothing was made", ref.Name))
			return ctrl.Result{RequeueAfter: ProbeEvery}, nil
		}
		if cp.Status.NodeName != nodeName {
			done(false, zygov1.ReasonCrossNode, fmt.Sprintf("Checkpoint %s is on node %s and Sandbox %s on node %s: copying an image between nodes is not implemented (docs/kubernetes.md)", cp.Name, cp.Status.NodeName, src.Name, nodeName))
			return ctrl.Result{}, nil
		}
		from = cp.Status.CheckpointID
	}
	if f.Spec.NodeName != "" && f.Spec.NodeName != nodeName {
		return r.forkElsewhere(ctx, f, &src, nodeName, from, done) // crossnode.go
	}
	node, err := getNode(ctx, r.Client, nodeName)
	if err != nil {
		done(false, zygov1.ReasonNodeLost, err.Error())
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	a, err := r.Dialer.Agent(ctx, node)
	if err != nil {
		done(false, zygov1.ReasonForkFailed, err.Error())
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	if err := removeLeftovers(ctx, a, f); err != nil {
		done(false, zygov1.ReasonForkFailed, err.Error()+"; nothing was made")
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	ans, err := a.ForkWith(cctx, src.Status.Zygo.SandboxID, wire.ForkBody{N: int(f.Spec.Count), From: from, Names: forkCopyNames(f)}, nil)
	if err != nil && ans.Succeeded == 0 {
		done(false, zygov1.ReasonForkFailed, fmt.Sprintf("forking sandbox %s on node %s: %v", src.Status.Zygo.SandboxID, node.Name, err))
		f.Status.Failed, f.Status.Children = int32(len(ans.Children)), forkChildren(f.Name, ans) //nolint:gosec // at most 16
		// The image this try took restores nothing: the next try takes its own.
		if from == "" && ans.Checkpoint.ID != "" {
			r.dropImage(ctx, a, node.Name, ans.Checkpoint.ID)
		}
		if zygo.IsBadRequest(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	f.Status.NodeName, f.Status.CheckpointID = node.Name, ans.Checkpoint.ID
	f.Status.Succeeded, f.Status.Failed = int32(ans.Succeeded), int32(ans.Failed) //nolint:gosec // at most 16
	f.Status.Children = forkChildren(f.Name, ans)
	done(true, zygov1.ReasonForked, fmt.Sprintf("%d of %d copies run on node %s (checkpoint %s)", ans.Succeeded, f.Spec.Count, node.Name, ans.Checkpoint.ID))
	return ctrl.Result{}, nil
}

// forkChildren turns a fork's answer into per-copy status.
func forkChildren(fork string, ans wire.ForkAnswer) []zygov1.ForkChild {
	out := make([]zygov1.ForkChild, 0, len(ans.Children))
	for _, ch := range ans.Children {
		c := zygov1.ForkChild{Index: int32(ch.Index)} //nolint:gosec // at most 16
		switch {
		case ch.Sandbox != nil:
			c.Sandbox, c.SandboxID, c.Generation = forkChildName(fork, ch.Index), ch.Sandbox.ID, ch.Sandbox.Generation
		case ch.Error != nil:
			c.Error = ch.Error.Message
		}
		out = append(out, c)
	}
	return out
}

// ensureChildren creates the Sandbox of each running copy in f.Status, adopting the copy. A
// copy whose name is taken by an object f does not control (made before the fork, by anyone
// allowed to create Sandboxes) is removed from its node rather than left running with no
// Sandbox recording it: see nameTaken.
func (r *ForkReconciler) ensureChildren(ctx context.Context, f *zygov1.SandboxFork) error {
	var src agentsv1.Sandbox
	srcErr := r.Client.Get(ctx, client.ObjectKey{Namespace: f.Namespace, Name: f.Spec.SourceRef.Name}, &src)
	for i, ch := range f.Status.Children {
		if ch.SandboxID == "" {
			continue
		}
		sb := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: ch.Sandbox,
			Labels:      map[string]string{LabelFork: NameLabel(f.Name)},
			Annotations: map[string]string{agentsv1.AnnotationNode: f.Status.NodeName, agentsv1.AnnotationSandboxID: ch.SandboxID}}}
		if srcErr == nil {
			sb.Spec.Zygo = *src.Spec.Zygo.DeepCopy()
		}
		sb.Spec.NodeName = f.Status.NodeName
		if err := controllerutil.SetControllerReference(f, sb, r.Client.Scheme()); err != nil {
			return fmt.Errorf("owning copy %s: %w", sb.Name, err)
		}
		err := r.Client.Create(ctx, sb)
		switch {
		case err == nil:
			continue
		case !apierrors.IsAlreadyExists(err):
			return fmt.Errorf("creating Sandbox %s for copy %s: %w", sb.Name, ch.SandboxID, err)
		}
		var there agentsv1.Sandbox
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(sb), &there); err != nil {
			return fmt.Errorf("reading Sandbox %s: %w", sb.Name, err) // deleted meanwhile: retried
		}
		if metav1.IsControlledBy(&there, f) {
			continue
		}
		if err := r.nameTaken(ctx, f, i); err != nil {
			return err
		}
	}
	return nil
}

// nameTaken removes copy f.Status.Children[i] from its node, its Sandbox's name being taken by
// an object f does not control, and records that in f's status: the child loses its sandbox
// and gets the error, Complete turns False with reason NameTaken naming the object. An error
// (the node did not answer) leaves the status as it was: the next reconcile tries again.
func (r *ForkReconciler) nameTaken(ctx context.Context, f *zygov1.SandboxFork, i int) error {
	ch := &f.Status.Children[i]
	node, err := getNode(ctx, r.Client, f.Status.NodeName)
	if err == nil {
		a, aerr := r.Dialer.Agent(ctx, node)
		if aerr != nil {
			return fmt.Errorf("removing copy %s (its name %s is taken): %w", ch.SandboxID, ch.Sandbox, aerr)
		}
		cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
		err = a.RemoveSandbox(cctx, ch.SandboxID)
		cancel()
		if err != nil && !zygo.IsNotFound(err) {
			return fmt.Errorf("removing copy %s (its name %s is taken): %w", ch.SandboxID, ch.Sandbox, err)
		}
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading ZygoNode %s: %w", f.Status.NodeName, err)
	} // a node that no longer exists took the copy with it
	before := f.DeepCopy()
	msg := fmt.Sprintf("Sandbox %s/%s already exists and is not this SandboxFork's: copy %d (%s) was removed from node %s", f.Namespace, ch.Sandbox, ch.Index, ch.SandboxID, f.Status.NodeName)
	log.FromContext(ctx).Info("a fork copy's Sandbox name is taken: copy removed", "sandbox", ch.Sandbox, "sandbox_id", ch.SandboxID)
	ch.Sandbox, ch.SandboxID, ch.Generation, ch.Error = "", "", "", msg
	f.Status.Succeeded--
	f.Status.Failed++
	setCondition(&f.Status.Conditions, f.Generation, zygov1.ConditionComplete, false, zygov1.ReasonNameTaken, msg)
	if err := r.Client.Status().Patch(ctx, f, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("writing the status: %w", err)
	}
	return nil
}

// undo removes the copies a fork made when they could not be recorded.
func (r *ForkReconciler) undo(ctx context.Context, f *zygov1.SandboxFork) error {
	node, err := getNode(ctx, r.Client, f.Status.NodeName)
	if err != nil {
		return nil //nolint:nilerr // nothing was forked (no node recorded), or the node is gone with its copies
	}
	a, err := r.Dialer.Agent(ctx, node)
	if err != nil {
		return err
	}
	var errs []error
	for _, ch := range f.Status.Children {
		if ch.SandboxID != "" {
			if err := a.RemoveSandbox(ctx, ch.SandboxID); err != nil && !zygo.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("removing unrecorded copy %s: %w", ch.SandboxID, err))
			}
		}
	}
	if f.Status.CopiedFrom != "" && f.Status.CheckpointID != "" && len(errs) == 0 { // the image a cross-node fork copied
		if err := a.RemoveCheckpoint(ctx, f.Status.CheckpointID); err != nil && !zygo.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing unrecorded copied image %s: %w", f.Status.CheckpointID, err))
		}
	}
	return errors.Join(errs...)
}

// SetupWithManager registers the reconciler; a Sandbox's change requeues the forks waiting
// on it through the periodic requeue, and its copies' changes through ownership.
func (r *ForkReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.wake = make(chan event.GenericEvent, reconcileWorkers)
	return ctrl.NewControllerManagedBy(mgr).For(&zygov1.SandboxFork{}).Named("sandboxfork").
		WithOptions(controller.Options{MaxConcurrentReconciles: reconcileWorkers}).
		Owns(&agentsv1.Sandbox{}).
		WatchesRawSource(source.Channel(r.wake, &handler.EnqueueRequestForObject{})).Complete(r)
}
