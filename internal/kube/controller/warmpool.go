package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	extv1 "github.com/zygo-run/zygo/internal/kube/api/extensions/v1beta1"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// WarmPoolReconciler keeps spec.replicas source Sandboxes per pool, spread over the nodes,
// each checkpointed once it runs. A source is a Sandbox of the pool's namespace labelled with
// the pool's name and controlled by the pool (its UID): a labelled Sandbox the pool does not
// control is neither counted, checkpointed nor deleted. The image's id is recorded in the
// source's status.zygo.warmCheckpointID, which only the controller writes; claims fork from
// nothing else (an annotation, writable by whoever may edit the Sandbox, is never read).
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
	srcs, err := poolSources(ctx, r.Client, &p)
	if err != nil {
		return ctrl.Result{}, err
	}
	if p.DeletionTimestamp != nil {
		for i := range srcs {
			if err := r.Client.Delete(ctx, &srcs[i]); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("deleting source %s: %w", srcs[i].Name, err)
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
	res, err := r.sync(ctx, &p, srcs)
	if perr := patchStatus(ctx, r.Client, &p, before, before.Status, p.Status); perr != nil && err == nil {
		err = fmt.Errorf("writing the status: %w", perr)
	}
	return res, err
}

// sync makes and checkpoints the sources and writes p.Status (the caller patches it).
func (r *WarmPoolReconciler) sync(ctx context.Context, p *extv1.SandboxWarmPool, srcs []agentsv1.Sandbox) (ctrl.Result, error) {
	p.Status.Selector = extv1.LabelWarmPool + "=" + NameLabel(p.Name)
	var tpl extv1.SandboxTemplate
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Spec.TemplateRef.Name}, &tpl); err != nil {
		if apierrors.IsNotFound(err) {
			setCondition(&p.Status.Conditions, p.Generation, agentsv1.ConditionReady, false, extv1.ReasonTemplateNotFound,
				fmt.Sprintf("spec.sandboxTemplateRef.name: SandboxTemplate %s/%s does not exist", p.Namespace, p.Spec.TemplateRef.Name))
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("reading the template: %w", err)
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
	var failReason, failMsg string // this pass's problem, if any
	for i := 0; i < int(p.Spec.Replicas); i++ {
		sb, ok := have[sourceName(p.Name, i)]
		delete(have, sourceName(p.Name, i))
		if !ok {
			if err := r.makeSource(ctx, p, &tpl, i, used); err != nil {
				var taken *errNameTaken
				if !errors.As(err, &taken) {
					return ctrl.Result{}, err
				}
				failReason, failMsg = agentsv1.ReasonCreateFailed, taken.Error()
				continue
			}
			existing++
			continue
		}
		existing++
		ok, err := r.checkpointSource(ctx, sb)
		if err != nil {
			failReason, failMsg = extv1.ReasonForkFailed, err.Error()
		}
		if ok {
			ready++
		}
	}
	for _, extra := range have { // sources past spec.replicas
		if err := r.Client.Delete(ctx, extra); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("deleting source %s: %w", extra.Name, err)
		}
	}
	p.Status.Replicas, p.Status.ReadyReplicas = existing, ready
	switch {
	case ready == p.Spec.Replicas:
		setCondition(&p.Status.Conditions, p.Generation, agentsv1.ConditionReady, true, "PoolReady", fmt.Sprintf("%d warm sandboxes ready to fork", ready))
	case failReason != "":
		setCondition(&p.Status.Conditions, p.Generation, agentsv1.ConditionReady, false, failReason, failMsg)
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	default:
		setCondition(&p.Status.Conditions, p.Generation, agentsv1.ConditionReady, false, "Warming", fmt.Sprintf("%d of %d warm sandboxes ready", ready, p.Spec.Replicas))
	}
	return ctrl.Result{}, nil
}

// poolSources returns the Sandboxes of p's namespace labelled with p's name that p controls.
func poolSources(ctx context.Context, c client.Reader, p *extv1.SandboxWarmPool) ([]agentsv1.Sandbox, error) {
	var list agentsv1.SandboxList
	if err := c.List(ctx, &list, client.InNamespace(p.Namespace), client.MatchingLabels{extv1.LabelWarmPool: NameLabel(p.Name)}); err != nil {
		return nil, fmt.Errorf("listing the sources of warm pool %s: %w", p.Name, err)
	}
	out := list.Items[:0]
	for _, s := range list.Items {
		if metav1.IsControlledBy(&s, p) {
			out = append(out, s)
		}
	}
	return out, nil
}

// makeSource creates the pool's i-th source Sandbox, pinned to a Ready node no other source
// is on when there is one.
func (r *WarmPoolReconciler) makeSource(ctx context.Context, p *extv1.SandboxWarmPool, tpl *extv1.SandboxTemplate, i int, used map[string]bool) error {
	sb := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: sourceName(p.Name, i),
		Labels: map[string]string{extv1.LabelWarmPool: NameLabel(p.Name)}}}
	sb.Spec.Zygo = *tpl.Spec.Zygo.DeepCopy()
	if n, err := pickNode(ctx, r.Client, used); err == nil {
		sb.Spec.NodeName = n.Name
		used[n.Name] = true
	}
	if err := controllerutil.SetControllerReference(p, sb, r.Client.Scheme()); err != nil {
		return fmt.Errorf("owning source %s: %w", sb.Name, err)
	}
	err := r.Client.Create(ctx, sb)
	if apierrors.IsAlreadyExists(err) {
		// Made by an earlier pass not yet in the cache, or a Sandbox of that name the pool
		// does not control, which is never used as a source.
		var have agentsv1.Sandbox
		if gerr := r.Client.Get(ctx, client.ObjectKeyFromObject(sb), &have); gerr == nil && !metav1.IsControlledBy(&have, p) {
			return &errNameTaken{fmt.Sprintf("source %s: a Sandbox of that name exists that this pool does not control; delete or rename it", sb.Name)}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating source %s: %w", sb.Name, err)
	}
	return nil
}

// errNameTaken is makeSource's error when a Sandbox the pool does not control has the name.
type errNameTaken struct{ msg string }

func (e *errNameTaken) Error() string { return e.msg }

// checkpointSource checkpoints a running source once (tag "warm-" + its UID, see
// checkpointOwnTag) and records the image's id in its status; it reports whether the source
// is ready to be forked.
func (r *WarmPoolReconciler) checkpointSource(ctx context.Context, sb *agentsv1.Sandbox) (bool, error) {
	if !meta.IsStatusConditionTrue(sb.Status.Conditions, agentsv1.ConditionReady) {
		return false, nil
	}
	if sb.Status.Zygo.WarmCheckpointID != "" {
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
	id, err := checkpointOwnTag(cctx, a, sb.Status.Zygo.SandboxID, "warm-"+string(sb.UID))
	if err != nil {
		return false, fmt.Errorf("checkpointing warm sandbox %s on node %s: %w", sb.Name, node.Name, err)
	}
	before := sb.DeepCopy()
	sb.Status.Zygo.WarmCheckpointID = id
	if err := r.Client.Status().Patch(ctx, sb, client.MergeFrom(before)); err != nil {
		return false, fmt.Errorf("recording the checkpoint of %s: %w", sb.Name, err)
	}
	return true, nil
}

// checkpointOwnTag returns the id of an image of sandbox id tagged tag, taking one if there is
// none. An agent's tags are not unique and are shared by every namespace's objects: the image
// the tag names now (the newest with it) is reused only when it was taken of sandbox id (an
// earlier try whose answer was lost), never when it is another sandbox's; and what is
// returned is the image's id, never the tag, so that a later removal cannot hit another
// image that takes the tag.
func checkpointOwnTag(ctx context.Context, a Agent, id, tag string) (string, error) {
	lctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	got, err := a.GetCheckpoint(lctx, tag)
	cancel()
	switch {
	case err == nil && got.SandboxID == id:
		return got.ID, nil
	case err != nil && !zygo.IsNotFound(err):
		return "", fmt.Errorf("looking up tag %q: %w", tag, err)
	}
	cp, err := a.Checkpoint(ctx, id, tag)
	if err != nil {
		return "", err
	}
	return cp.ID, nil
}

// SetupWithManager registers the reconciler; a source's change requeues its pool, and so does
// the creation or change of the template a pool names.
func (r *WarmPoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&extv1.SandboxWarmPool{}).Named("sandboxwarmpool").
		Owns(&agentsv1.Sandbox{}).
		Watches(&extv1.SandboxTemplate{}, handler.EnqueueRequestsFromMapFunc(r.poolsOfTemplate)).
		Complete(r)
}

// poolsOfTemplate lists the pools of the template's namespace that name it.
func (r *WarmPoolReconciler) poolsOfTemplate(ctx context.Context, o client.Object) []reconcile.Request {
	var list extv1.SandboxWarmPoolList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, p := range list.Items {
		if p.Spec.TemplateRef.Name == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
		}
	}
	return out
}
