package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

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
)

// Launch types of a claim's sandbox (SandboxClaim.status.sandbox.launchType).
const (
	LaunchWarm = "warm" // a resealed fork of a warm pool's sandbox
	LaunchCold = "cold" // a fresh create from the template
)

// ClaimReconciler gives each SandboxClaim one Sandbox: a fork of a warm pool's sandbox when
// one is ready, else a fresh one from the template.
type ClaimReconciler struct {
	Client client.Client
	Now    func() time.Time // nil: time.Now
}

// Reconcile makes, mirrors, expires or deletes one claim's Sandbox.
func (r *ClaimReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cl extv1.SandboxClaim
	if err := r.Client.Get(ctx, req.NamespacedName, &cl); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cl.DeletionTimestamp != nil {
		// There may be no garbage collector (kube-controller-manager) to follow owner
		// references: the claim deletes its Sandbox itself.
		if err := r.deleteSandbox(ctx, &cl); err != nil {
			return ctrl.Result{}, err
		}
		if controllerutil.RemoveFinalizer(&cl, Finalizer) {
			return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, &cl))
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(&cl, Finalizer) {
		if err := r.Client.Update(ctx, &cl); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
	}
	if done, err := r.expire(ctx, &cl); done || err != nil {
		return ctrl.Result{}, err
	}
	before := cl.DeepCopy()
	res, err := r.sync(ctx, &cl)
	if perr := patchStatus(ctx, r.Client, &cl, before, before.Status, cl.Status); perr != nil && !apierrors.IsNotFound(perr) {
		return ctrl.Result{}, errors.Join(err, fmt.Errorf("writing the status: %w", perr))
	}
	return r.untilShutdown(&cl, res), err
}

// untilShutdown adds to res a requeue at cl's shutdownTime, if it has one to come (nothing
// else wakes the claim then).
func (r *ClaimReconciler) untilShutdown(cl *extv1.SandboxClaim, res ctrl.Result) ctrl.Result {
	lc := cl.Spec.Lifecycle
	if lc == nil || lc.ShutdownTime == nil {
		return res
	}
	now := time.Now()
	if r.Now != nil {
		now = r.Now()
	}
	// A little after it: the next reconcile must not come before shutdownTime.
	if d := lc.ShutdownTime.Sub(now) + 100*time.Millisecond; d > 0 && (res.RequeueAfter == 0 || d < res.RequeueAfter) {
		res.RequeueAfter = d
	}
	return res
}

// expire applies the claim's shutdownPolicy once its shutdownTime passed; it reports whether
// it did (then the caller writes nothing more).
func (r *ClaimReconciler) expire(ctx context.Context, cl *extv1.SandboxClaim) (bool, error) {
	now := time.Now()
	if r.Now != nil {
		now = r.Now()
	}
	lc := cl.Spec.Lifecycle
	if lc == nil || lc.ShutdownTime == nil || now.Before(lc.ShutdownTime.Time) {
		return false, nil
	}
	if lc.ShutdownPolicy == extv1.ClaimShutdownPolicyDelete {
		return true, client.IgnoreNotFound(r.Client.Delete(ctx, cl))
	}
	if err := r.deleteSandbox(ctx, cl); err != nil {
		return true, err
	}
	before := cl.DeepCopy()
	cl.Status.SandboxStatus.PodIPs = nil
	claimReady(cl, false, agentsv1.ReasonExpired, "shutdownTime passed: the sandbox was deleted")
	return true, client.IgnoreNotFound(r.Client.Status().Patch(ctx, cl, client.MergeFrom(before)))
}

func (r *ClaimReconciler) sync(ctx context.Context, cl *extv1.SandboxClaim) (ctrl.Result, error) {
	var sb agentsv1.Sandbox
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(cl), &sb)
	if err == nil {
		if !metav1.IsControlledBy(&sb, cl) {
			claimReady(cl, false, agentsv1.ReasonCreateFailed, fmt.Sprintf("a Sandbox named %s exists and is not this claim's", sb.Name))
			return ctrl.Result{}, nil
		}
		r.mirror(cl, &sb)
		return ctrl.Result{}, nil
	}
	if !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("reading the claim's Sandbox: %w", err)
	}
	return r.create(ctx, cl)
}

// create makes the claim's Sandbox from its template, as a fork of a warm pool's sandbox when
// the claim allows it and one is ready.
func (r *ClaimReconciler) create(ctx context.Context, cl *extv1.SandboxClaim) (ctrl.Result, error) {
	var tpl extv1.SandboxTemplate
	key := client.ObjectKey{Namespace: cl.Namespace, Name: cl.Spec.TemplateRef.Name}
	if err := r.Client.Get(ctx, key, &tpl); err != nil {
		if apierrors.IsNotFound(err) {
			claimReady(cl, false, extv1.ReasonTemplateNotFound,
				fmt.Sprintf("spec.sandboxTemplateRef.name: SandboxTemplate %s/%s does not exist; no sandbox was made", key.Namespace, key.Name))
			return ctrl.Result{}, nil // the template's creation requeues the claim
		}
		return ctrl.Result{}, fmt.Errorf("reading the template: %w", err)
	}
	sb := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: cl.Namespace, Name: cl.Name,
		Labels: map[string]string{"agents.x-k8s.io/claim-uid": string(cl.UID)}}}
	sb.Spec.Zygo = *tpl.Spec.Zygo.DeepCopy()
	sb.Spec.Zygo.Env = mergeEnv(sb.Spec.Zygo.Env, cl.Spec.Env)
	launch := LaunchCold
	from, err := r.warmSource(ctx, cl, tpl.Name)
	if err != nil {
		var pnf *poolNotFound
		if errors.As(err, &pnf) {
			claimReady(cl, false, extv1.ReasonPoolNotFound, pnf.Error())
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if from != "" {
		sb.Annotations = map[string]string{AnnotationForkFrom: from}
		launch = LaunchWarm
	}
	if err := controllerutil.SetControllerReference(cl, sb, r.Client.Scheme()); err != nil {
		return ctrl.Result{}, fmt.Errorf("owning the Sandbox: %w", err)
	}
	if err := r.Client.Create(ctx, sb); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, fmt.Errorf("creating Sandbox %s: %w", sb.Name, err)
	}
	cl.Status.SandboxStatus = extv1.ClaimedSandbox{Name: sb.Name, LaunchType: launch}
	claimReady(cl, false, extv1.ReasonSandboxNotReady, "Sandbox "+sb.Name+" was made ("+launch+"); waiting for it to run")
	return ctrl.Result{}, nil
}

// poolNotFound is warmSource's error when the claim names a pool that does not exist.
type poolNotFound struct{ msg string }

func (e *poolNotFound) Error() string { return e.msg }

// warmSource returns "NODE/SANDBOX-ID/CHECKPOINT" of a ready warm sandbox of template tpl the
// claim may fork, or "" when it gets a fresh sandbox.
func (r *ClaimReconciler) warmSource(ctx context.Context, cl *extv1.SandboxClaim, tpl string) (string, error) {
	policy := extv1.WarmPoolPolicyDefault
	if cl.Spec.WarmPool != nil {
		policy = *cl.Spec.WarmPool
	}
	if policy == extv1.WarmPoolPolicyNone || len(cl.Spec.Env) > 0 {
		return "", nil
	}
	var pools []extv1.SandboxWarmPool
	if policy == extv1.WarmPoolPolicyDefault {
		var list extv1.SandboxWarmPoolList
		if err := r.Client.List(ctx, &list, client.InNamespace(cl.Namespace)); err != nil {
			return "", fmt.Errorf("listing warm pools: %w", err)
		}
		for _, p := range list.Items {
			if p.Spec.TemplateRef.Name == tpl {
				pools = append(pools, p)
			}
		}
	} else {
		var p extv1.SandboxWarmPool
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cl.Namespace, Name: string(policy)}, &p); err != nil {
			if apierrors.IsNotFound(err) {
				return "", &poolNotFound{fmt.Sprintf("spec.warmpool: SandboxWarmPool %s/%s does not exist; no sandbox was made", cl.Namespace, policy)}
			}
			return "", fmt.Errorf("reading warm pool %s: %w", policy, err)
		}
		pools = append(pools, p)
	}
	for _, p := range pools {
		srcs, err := poolSources(ctx, r.Client, &p)
		if err != nil {
			return "", err
		}
		for _, s := range srcs {
			// The image is the one the controller took and recorded in the source's status.
			cp := s.Status.Zygo.WarmCheckpointID
			if cp != "" && s.DeletionTimestamp == nil && meta.IsStatusConditionTrue(s.Status.Conditions, agentsv1.ConditionReady) {
				return s.Status.NodeName + "/" + s.Status.Zygo.SandboxID + "/" + cp, nil
			}
		}
	}
	return "", nil
}

// mirror copies the Sandbox's readiness into the claim.
func (r *ClaimReconciler) mirror(cl *extv1.SandboxClaim, sb *agentsv1.Sandbox) {
	cl.Status.SandboxStatus.Name = sb.Name
	cl.Status.SandboxStatus.PodIPs = sb.Status.PodIPs
	if cl.Status.SandboxStatus.LaunchType == "" {
		cl.Status.SandboxStatus.LaunchType = LaunchCold
		if sb.Annotations[AnnotationForkFrom] != "" {
			cl.Status.SandboxStatus.LaunchType = LaunchWarm
		}
	}
	c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1.ConditionReady)
	switch {
	case c == nil:
		claimReady(cl, false, extv1.ReasonSandboxNotReady, "Sandbox "+sb.Name+" has no status yet")
	case c.Status == metav1.ConditionTrue:
		claimReady(cl, true, c.Reason, c.Message)
	default:
		claimReady(cl, false, c.Reason, "Sandbox "+sb.Name+": "+c.Message)
	}
}

// deleteSandbox deletes the claim's Sandbox, if any (its own finalizer cleans the node).
func (r *ClaimReconciler) deleteSandbox(ctx context.Context, cl *extv1.SandboxClaim) error {
	var sb agentsv1.Sandbox
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(cl), &sb); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(&sb, cl) || sb.DeletionTimestamp != nil {
		return nil
	}
	if err := r.Client.Delete(ctx, &sb); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the claim's Sandbox: %w", err)
	}
	return nil
}

// mergeEnv returns base with add's variables set (replacing those of the same name).
func mergeEnv(base, add []agentsv1.EnvVar) []agentsv1.EnvVar {
	out := append([]agentsv1.EnvVar(nil), base...)
	for _, e := range add {
		replaced := false
		for i := range out {
			if out[i].Name == e.Name {
				out[i], replaced = e, true
			}
		}
		if !replaced {
			out = append(out, e)
		}
	}
	return out
}

func claimReady(cl *extv1.SandboxClaim, ok bool, reason, msg string) {
	setCondition(&cl.Status.Conditions, cl.Generation, agentsv1.ConditionReady, ok, reason, msg)
}

// SetupWithManager registers the reconciler: a claim is requeued by its Sandbox's changes and
// by the creation of the template it waits for.
func (r *ClaimReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&extv1.SandboxClaim{}).Named("sandboxclaim").
		Owns(&agentsv1.Sandbox{}).
		Watches(&extv1.SandboxTemplate{}, handler.EnqueueRequestsFromMapFunc(r.claimsOfTemplate)).
		Complete(r)
}

func (r *ClaimReconciler) claimsOfTemplate(ctx context.Context, o client.Object) []reconcile.Request {
	var list extv1.SandboxClaimList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, c := range list.Items {
		if c.Spec.TemplateRef.Name == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
		}
	}
	return out
}
