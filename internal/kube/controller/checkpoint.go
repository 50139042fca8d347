package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

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
		if err := r.remove(ctx, &cp); err != nil {
			return ctrl.Result{}, err
		}
		if controllerutil.RemoveFinalizer(&cp, Finalizer) {
			return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, &cp))
		}
		return ctrl.Result{}, nil
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
	tag := cp.Spec.Tag
	if tag == "" {
		tag = "k8s-" + string(cp.UID)
	}
	img, err := a.Checkpoint(cctx, sb.Status.Zygo.SandboxID, tag)
	if err != nil && zygo.IsConflict(err) {
		img.ID, err = tag, nil // the tag exists: an earlier try's answer was lost
	}
	if err != nil {
		cond(false, zygov1.ReasonCheckpointFailed, fmt.Sprintf("checkpointing sandbox %s on node %s: %v", sb.Status.Zygo.SandboxID, node.Name, err))
		return ctrl.Result{RequeueAfter: ProbeEvery}
	}
	cp.Status.NodeName, cp.Status.CheckpointID = node.Name, img.ID
	cond(true, zygov1.ReasonCheckpointed, fmt.Sprintf("image %s on node %s", img.ID, node.Name))
	return ctrl.Result{}
}

// remove deletes the image from its node; a node that is gone or not Ready is skipped (the
// image is lost with it).
func (r *CheckpointReconciler) remove(ctx context.Context, cp *zygov1.Checkpoint) error {
	if cp.Status.CheckpointID == "" {
		return nil
	}
	node, err := getNode(ctx, r.Client, cp.Status.NodeName)
	if err != nil || !nodeReady(node) {
		return nil
	}
	a, err := r.Dialer.Agent(ctx, node)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	defer cancel()
	if err := a.RemoveCheckpoint(cctx, cp.Status.CheckpointID); err != nil && !zygo.IsNotFound(err) {
		return fmt.Errorf("removing checkpoint %s on node %s: %w", cp.Status.CheckpointID, node.Name, err)
	}
	return nil
}

// SetupWithManager registers the reconciler.
func (r *CheckpointReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&zygov1.Checkpoint{}).Named("checkpoint").Complete(r)
}
