package controller

import (
	"context"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	extv1 "github.com/zygo-run/zygo/internal/kube/api/extensions/v1beta1"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// AnnotationWarmCheckpoint on a warm pool's source Sandbox is the id of its checkpoint on its
// node: claims fork from it.
const AnnotationWarmCheckpoint = "zygo.run/warm-checkpoint"

// WarmPoolReconciler keeps spec.replicas source Sandboxes per pool, spread over the nodes,
// each checkpointed once it runs.
type WarmPoolReconciler struct {
	Client client.Client
	Dialer Dialer
}

// sourceName is the name of a pool's i-th source Sandbox.
func sourceName(pool string, i int) string { return pool + "-warm-" + strconv.Itoa(i) }

// Reconcile makes, checkpoints or deletes a pool's sources and writes its status.
func (r *WarmPoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var p extv1.SandboxWarmPool
	if err := r.Client.Get(ctx, req.NamespacedName, &p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var srcs agentsv1.SandboxList
	if err := r.Client.List(ctx, &srcs, client.InNamespace(p.Namespace), client.MatchingLabels{extv1.LabelWarmPool: p.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the pool's sources: %w", err)
	}
	if p.DeletionTimestamp != nil {
		for i := range srcs.Items {
			if err := r.Client.Delete(ctx, &srcs.Items[i]); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("deleting source %s: %w", srcs.Items[i].Name, err)
			}
		}
		if controllerutil.RemoveFinalizer(&p, Finalizer) {
			return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, &p))
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(&p, Finalizer) {
		if err := r.Client.Update(ctx, &p); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
	}
	before := p.DeepCopy()
	err := r.sync(ctx, &p, srcs.Items)
	if perr := patchStatus(ctx, r.Client, &p, before, before.Status, p.Status); perr != nil && err == nil {
		err = fmt.Errorf("writing the status: %w", perr)
	}
	return ctrl.Result{}, err
}

func (r *WarmPoolReconciler) sync(ctx context.Context, p *extv1.SandboxWarmPool, srcs []agentsv1.Sandbox) error {
	p.Status.Selector = extv1.LabelWarmPool + "=" + p.Name
	var tpl extv1.SandboxTemplate
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Spec.TemplateRef.Name}, &tpl); err != nil {
		if apierrors.IsNotFound(err) {
			setCondition(&p.Status.Conditions, p.Generation, agentsv1.ConditionReady, false, extv1.ReasonTemplateNotFound,
				fmt.Sprintf("spec.sandboxTemplateRef.name: SandboxTemplate %s/%s does not exist", p.Namespace, p.Spec.TemplateRef.Name))
			return nil
		}
		return fmt.Errorf("reading the template: %w", err)
	}
	have := map[string]*agentsv1.Sandbox{}
	used := map[string]bool{} // nodes holding a source already
	for i := range srcs {
		have[srcs[i].Name] = &srcs[i]
		if n := srcs[i].Status.NodeName; n != "" {
			used[n] = true
		}
	}
	var existing, ready int32
	for i := 0; i < int(p.Spec.Replicas); i++ {
		sb, ok := have[sourceName(p.Name, i)]
		delete(have, sourceName(p.Name, i))
		if !ok {
			if err := r.makeSource(ctx, p, &tpl, i, used); err != nil {
				return err
			}
			existing++
			continue
		}
		existing++
		ok, err := r.checkpointSource(ctx, sb)
		if err != nil {
			setCondition(&p.Status.Conditions, p.Generation, agentsv1.ConditionReady, false, extv1.ReasonForkFailed, err.Error())
		}
		if ok {
			ready++
		}
	}
	for _, extra := range have { // sources past spec.replicas
		if err := r.Client.Delete(ctx, extra); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting source %s: %w", extra.Name, err)
		}
	}
	p.Status.Replicas, p.Status.ReadyReplicas = existing, ready
	if ready == p.Spec.Replicas {
		setCondition(&p.Status.Conditions, p.Generation, agentsv1.ConditionReady, true, "PoolReady", fmt.Sprintf("%d warm sandboxes ready to fork", ready))
	} else if c := meta.FindStatusCondition(p.Status.Conditions, agentsv1.ConditionReady); c == nil || c.Reason != extv1.ReasonForkFailed {
		setCondition(&p.Status.Conditions, p.Generation, agentsv1.ConditionReady, false, "Warming", fmt.Sprintf("%d of %d warm sandboxes ready", ready, p.Spec.Replicas))
	}
	return nil
}

// makeSource creates the pool's i-th source Sandbox, pinned to a Ready node no other source
// is on when there is one.
func (r *WarmPoolReconciler) makeSource(ctx context.Context, p *extv1.SandboxWarmPool, tpl *extv1.SandboxTemplate, i int, used map[string]bool) error {
	sb := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: sourceName(p.Name, i),
		Labels: map[string]string{extv1.LabelWarmPool: p.Name}}}
	sb.Spec.Zygo = *tpl.Spec.Zygo.DeepCopy()
	if n, err := pickNode(ctx, r.Client, used); err == nil {
		sb.Spec.NodeName = n.Name
		used[n.Name] = true
	}
	if err := controllerutil.SetControllerReference(p, sb, r.Client.Scheme()); err != nil {
		return fmt.Errorf("owning source %s: %w", sb.Name, err)
	}
	if err := r.Client.Create(ctx, sb); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating source %s: %w", sb.Name, err)
	}
	return nil
}

// checkpointSource checkpoints a running source once and records the image's id on it; it
// reports whether the source is ready to be forked.
func (r *WarmPoolReconciler) checkpointSource(ctx context.Context, sb *agentsv1.Sandbox) (bool, error) {
	if !meta.IsStatusConditionTrue(sb.Status.Conditions, agentsv1.ConditionReady) {
		return false, nil
	}
	if sb.Annotations[AnnotationWarmCheckpoint] != "" {
		return true, nil
	}
	node, err := getNode(ctx, r.Client, sb.Status.NodeName)
	if err != nil {
		return false, err
	}
	a, err := r.Dialer.Agent(ctx, node)
	if err != nil {
		return false, err
	}
	cctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	tag := "warm-" + string(sb.UID)
	cp, err := a.Checkpoint(cctx, sb.Status.Zygo.SandboxID, tag)
	if zygo.IsConflict(err) { // tagged by an earlier try whose answer was lost
		cp.ID, err = tag, nil
	}
	if err != nil {
		return false, fmt.Errorf("checkpointing warm sandbox %s on node %s: %w", sb.Name, node.Name, err)
	}
	patch := client.MergeFrom(sb.DeepCopy())
	if sb.Annotations == nil {
		sb.Annotations = map[string]string{}
	}
	sb.Annotations[AnnotationWarmCheckpoint] = cp.ID
	if err := r.Client.Patch(ctx, sb, patch); err != nil {
		return false, fmt.Errorf("recording the checkpoint of %s: %w", sb.Name, err)
	}
	return true, nil
}

// SetupWithManager registers the reconciler; a source's change requeues its pool.
func (r *WarmPoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&extv1.SandboxWarmPool{}).Named("sandboxwarmpool").
		Owns(&agentsv1.Sandbox{}).Complete(r)
}
