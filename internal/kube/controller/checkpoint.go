package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// CheckpointReconciler takes each Checkpoint's image once, on its Sandbox's node, and removes
// it from there when the Checkpoint is deleted.
type CheckpointReconciler struct {
	Client client.Client
	Dialer Dialer
}

// Reconcile checkpoints or cleans up one Checkpoint.
func (r *CheckpointReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cp zygov1.Checkpoint
	if err := r.Client.Get(ctx, req.NamespacedName, &cp); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cp.DeletionTimestamp != nil {
		return r.finalize(ctx, &cp)
	}
	if cp.Status.CheckpointID != "" {
		return ctrl.Result{}, nil // an image is immutable: nothing more to do
	}
	if controllerutil.AddFinalizer(&cp, Finalizer) {
		if err := r.Client.Update(ctx, &cp); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
	}
	before := cp.DeepCopy()
	res := r.take(ctx, &cp)
	if err := r.Client.Status().Patch(ctx, &cp, client.MergeFrom(before)); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing the status: %w", err)
	}
	return res, nil
}

// take checkpoints the Sandbox and records the outcome in cp.Status.
func (r *CheckpointReconciler) take(ctx context.Context, cp *zygov1.Checkpoint) ctrl.Result {
	cond := func(ok bool, reason, msg string) {
		setCondition(&cp.Status.Conditions, cp.Generation, zygov1.ConditionReady, ok, reason, msg)
	}
	var sb agentsv1.Sandbox
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cp.Namespace, Name: cp.Spec.SandboxRef.Name}, &sb); err != nil {
		if apierrors.IsNotFound(err) {
			cond(false, zygov1.ReasonSourceNotFound, fmt.Sprintf("spec.sandboxRef.name: Sandbox %s does not exist", cp.Spec.SandboxRef.Name))
			return ctrl.Result{RequeueAfter: ProbeEvery}
		}
		cond(false, zygov1.ReasonCheckpointFailed, err.Error())
		return ctrl.Result{RequeueAfter: ProbeEvery}
	}
	if !meta.IsStatusConditionTrue(sb.Status.Conditions, agentsv1.ConditionReady) {
		cond(false, zygov1.ReasonSourceNotReady, fmt.Sprintf("Sandbox %s is not Ready: %s", sb.Name, conditionMessage(sb.Status.Conditions, agentsv1.ConditionReady)))
		return ctrl.Result{RequeueAfter: ProbeEvery}
	}
	node, err := getNode(ctx, r.Client, sb.Status.NodeName)
	if err != nil {
		cond(false, zygov1.ReasonNodeLost, err.Error())
		return ctrl.Result{RequeueAfter: ProbeEvery}
	}
	a, err := r.Dialer.Agent(ctx, node)
	if err != nil {
		cond(false, zygov1.ReasonCheckpointFailed, err.Error())
		return ctrl.Result{RequeueAfter: ProbeEvery}
	}
	cctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	tag := checkpointTag(cp)
	// spec.tag is the user's and tags are shared by the node's every namespace: an image with
	// that tag is reused only when it is of this Sandbox's sandbox (checkpointOwnTag).
	imgID, err := checkpointOwnTag(cctx, a, sb.Status.Zygo.SandboxID, tag)
	if err != nil {
		cond(false, zygov1.ReasonCheckpointFailed, fmt.Sprintf("checkpointing sandbox %s on node %s: %v", sb.Status.Zygo.SandboxID, node.Name, err))
		return ctrl.Result{RequeueAfter: ProbeEvery}
	}
	cp.Status.NodeName, cp.Status.CheckpointID, cp.Status.Tag = node.Name, imgID, tag
	cond(true, zygov1.ReasonCheckpointed, fmt.Sprintf("image %s on node %s", imgID, node.Name))
	return ctrl.Result{}
}

// checkpointTag is the tag cp's image is taken with: spec.tag, else k8s-UID.
func checkpointTag(cp *zygov1.Checkpoint) string {
	if cp.Spec.Tag != "" {
		return cp.Spec.Tag
	}
	return "k8s-" + string(cp.UID)
}

// takenTag is the tag cp's image was taken with, as recorded in status.tag at the time (the
// spec may have changed since on an object made before spec.tag was immutable); an object
// recorded before status.tag existed falls back to checkpointTag.
func takenTag(cp *zygov1.Checkpoint) string {
	if cp.Status.Tag != "" {
		return cp.Status.Tag
	}
	return checkpointTag(cp)
}

// imageTagged reports whether image id on a carries tag (the one the controller gave it);
// an image that is gone counts as tagged (removing it is a no-op). The status naming the
// image is the controller's record, but a tenant allowed to write status could point it at
// another namespace's image: a removal checks the tag first (k8s-UID tags are unique; a
// spec.tag is the user's and may be shared: docs/kubernetes.md, known gaps).
func imageTagged(ctx context.Context, a Agent, id, tag string) (bool, error) {
	img, err := a.GetCheckpoint(ctx, id)
	switch {
	case zygo.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading image %s: %w", id, err)
	}
	return img.ID == id && img.Tag == tag, nil
}

// removeRetry is how soon a removal the agent refused (copies restored from the image still
// exist) is tried again.
const removeRetry = 2 * time.Second

// finalize removes the image from its node, then the finalizer. The finalizer stays, with the
// reason in the Ready condition, while the image cannot be removed: an image on a node that
// still exists is never orphaned.
func (r *CheckpointReconciler) finalize(ctx context.Context, cp *zygov1.Checkpoint) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(cp, Finalizer) {
		return ctrl.Result{}, nil
	}
	before := cp.DeepCopy()
	wait, reason, msg, err := r.remove(ctx, cp)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wait > 0 {
		setCondition(&cp.Status.Conditions, cp.Generation, zygov1.ConditionReady, false, reason, msg)
		if perr := patchStatus(ctx, r.Client, cp, before, before.Status, cp.Status); perr != nil {
			return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("writing the status: %w", perr))
		}
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	controllerutil.RemoveFinalizer(cp, Finalizer)
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, cp))
}

// remove deletes cp's image from its node. It returns wait > 0, with the condition's reason
// and message, when the image is still there and the removal must be tried again after wait:
// the agent refuses it while sandboxes restored from it exist (a fork's copies, whose own
// finalizers remove them), or the node is not Ready or failed. Only a ZygoNode that no longer
// exists lets the image go unremoved: it is lost with its node. err is for reading the node.
func (r *CheckpointReconciler) remove(ctx context.Context, cp *zygov1.Checkpoint) (wait time.Duration, reason, msg string, err error) {
	if cp.Status.CheckpointID == "" {
		return 0, "", "", nil // no image was taken
	}
	var node zygov1.ZygoNode
	if err := r.Client.Get(ctx, client.ObjectKey{Name: cp.Status.NodeName}, &node); err != nil {
		if apierrors.IsNotFound(err) {
			log.FromContext(ctx).Info("the checkpoint's node is gone: its image is lost with it", "node", cp.Status.NodeName, "checkpoint", cp.Status.CheckpointID)
			return 0, "", "", nil
		}
		return 0, "", "", fmt.Errorf("reading ZygoNode %s: %w", cp.Status.NodeName, err)
	}
	failed := func(m string) (time.Duration, string, string, error) {
		return ProbeEvery, zygov1.ReasonRemoveFailed, fmt.Sprintf("removing image %s on node %s: %s; retried, the finalizer stays", cp.Status.CheckpointID, node.Name, m), nil
	}
	if !nodeReady(&node) && node.DeletionTimestamp == nil { // a deleting node waits for this image: ask it
		return failed("the node is not Ready (" + conditionMessage(node.Status.Conditions, zygov1.ConditionReady) + ")")
	}
	a, err := r.Dialer.Agent(ctx, &node)
	if err != nil {
		return failed(err.Error())
	}
	cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	defer cancel()
	tag := takenTag(cp)
	if mine, err := imageTagged(cctx, a, cp.Status.CheckpointID, tag); err != nil {
		return failed(err.Error())
	} else if !mine {
		log.FromContext(ctx).Info("status.checkpointID names an image this Checkpoint did not take: not removing it",
			"node", node.Name, "checkpoint", cp.Status.CheckpointID, "tag", tag)
		return 0, "", "", nil
	}
	err = a.RemoveCheckpoint(cctx, cp.Status.CheckpointID)
	switch {
	case err == nil || zygo.IsNotFound(err):
		return 0, "", "", nil
	case zygo.IsConflict(err):
		return removeRetry, zygov1.ReasonInUse, fmt.Sprintf("node %s refuses to remove image %s yet: %v; the finalizer waits until those sandboxes are gone", node.Name, cp.Status.CheckpointID, err), nil
	}
	return failed(err.Error())
}

// SetupWithManager registers the reconciler.
func (r *CheckpointReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&zygov1.Checkpoint{}).Named("checkpoint").
		WithOptions(controller.Options{MaxConcurrentReconciles: reconcileWorkers}).Complete(r)
}
