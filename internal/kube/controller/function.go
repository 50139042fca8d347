package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// RoutePath is the path of the controller's route that invokes a Function.
func RoutePath(namespace, name string) string {
	return "/functions/" + namespace + "/" + name + "/invoke"
}

// FunctionReconciler deploys each Function on spec.replicas Ready nodes and keeps
// status.nodes, which the route forwards to, true.
type FunctionReconciler struct {
	Client client.Client
	Dialer Dialer
	// HTTP fetches URL and OCI sources; nil: defaultFetchClient (the zero SourcePolicy:
	// loopback, link-local and unspecified addresses refused).
	HTTP *http.Client
}

// Reconcile deploys, scales or removes one Function.
func (r *FunctionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var fn zygov1.Function
	if err := r.Client.Get(ctx, req.NamespacedName, &fn); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if fn.DeletionTimestamp != nil {
		if err := r.removeFrom(ctx, &fn, nodeNames(fn.Status.Nodes)); err != nil {
			return ctrl.Result{}, err
		}
		if controllerutil.RemoveFinalizer(&fn, Finalizer) {
			return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, &fn))
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(&fn, Finalizer) {
		if err := r.Client.Update(ctx, &fn); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
	}
	before := fn.DeepCopy()
	res, err := r.sync(ctx, &fn)
	if perr := patchStatus(ctx, r.Client, &fn, before, before.Status, fn.Status); perr != nil {
		return ctrl.Result{}, errors.Join(err, fmt.Errorf("writing the status: %w", perr))
	}
	return res, err
}

func (r *FunctionReconciler) sync(ctx context.Context, fn *zygov1.Function) (ctrl.Result, error) {
	cond := func(ok bool, reason, msg string) {
		setCondition(&fn.Status.Conditions, fn.Generation, zygov1.ConditionReady, ok, reason, msg)
	}
	fn.Status.Route = RoutePath(fn.Namespace, fn.Name)
	hc := r.HTTP
	if hc == nil {
		hc = defaultFetchClient
	}
	files, err := sourceFiles(ctx, r.Client, hc, fn)
	if err != nil {
		reason := zygov1.ReasonSourceFailed
		if errors.Is(err, errUnsupported) {
			reason = zygov1.ReasonSourceUnsupported
		} else if apierrors.IsNotFound(err) {
			reason = zygov1.ReasonSourceNotFound
		}
		cond(false, reason, err.Error())
		if errors.Is(err, errUnsupported) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	b, err := bundle(fn, files)
	if err != nil {
		cond(false, zygov1.ReasonSourceFailed, err.Error())
		return ctrl.Result{}, nil
	}
	digest, err := r.digest(ctx, fn, b)
	if err != nil {
		cond(false, zygov1.ReasonSourceNotFound, err.Error())
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	ready, err := readyNodes(ctx, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	keep, drop := planNodes(fn.Status.Nodes, ready, int(fn.Spec.Replicas))
	if err := r.removeFrom(ctx, fn, drop); err != nil {
		log.FromContext(ctx).Info("removing a scaled-down function failed; it stays on that node", "error", err)
	}
	redeploy := digest != fn.Status.SourceDigest
	var served []zygov1.FunctionNode
	var failures []string
	for _, name := range keep {
		prev := slices.IndexFunc(fn.Status.Nodes, func(n zygov1.FunctionNode) bool { return n.Name == name })
		if prev >= 0 && !redeploy {
			served = append(served, fn.Status.Nodes[prev])
			continue
		}
		v, err := r.deployOn(ctx, fn, name, b)
		if err != nil {
			failures = append(failures, err.Error())
			continue
		}
		served = append(served, zygov1.FunctionNode{Name: name, Version: v})
	}
	fn.Status.Nodes = served
	fn.Status.ReadyReplicas = int32(len(served)) //nolint:gosec // at most 64
	fn.Status.ObservedGeneration = fn.Generation
	if len(failures) == 0 {
		fn.Status.SourceDigest = digest
	}
	switch {
	case len(failures) > 0:
		cond(false, zygov1.ReasonDeployFailed, strings.Join(failures, "; "))
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	case len(served) < int(fn.Spec.Replicas):
		cond(false, zygov1.ReasonNotEnoughNodes, fmt.Sprintf("served by %d of %d nodes: only %d ZygoNodes are Ready", len(served), fn.Spec.Replicas, len(ready)))
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	cond(true, zygov1.ReasonDeployed, fmt.Sprintf("served by %d nodes at %s", len(served), fn.Status.Route))
	return ctrl.Result{}, nil
}

// planNodes returns the nodes that should serve the function — those serving it that are
// still Ready, then other Ready nodes, up to replicas — and those to remove it from.
func planNodes(current []zygov1.FunctionNode, ready []zygov1.ZygoNode, replicas int) (keep, drop []string) {
	isReady := map[string]bool{}
	for _, n := range ready {
		isReady[n.Name] = true
	}
	for _, n := range current {
		if isReady[n.Name] && len(keep) < replicas {
			keep = append(keep, n.Name)
		} else if isReady[n.Name] {
			drop = append(drop, n.Name)
		}
	}
	for _, n := range ready {
		if len(keep) >= replicas {
			break
		}
		if !slices.Contains(keep, n.Name) && !slices.Contains(drop, n.Name) {
			keep = append(keep, n.Name)
		}
	}
	return keep, drop
}

// digest is the sha256 of the bundle and the secrets' values: a change of either redeploys.
func (r *FunctionReconciler) digest(ctx context.Context, fn *zygov1.Function, b []byte) (string, error) {
	h := sha256.New()
	h.Write(b)
	for _, s := range fn.Spec.Secrets {
		var sec corev1.Secret
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: fn.Namespace, Name: s.SecretKeyRef.Name}, &sec); err != nil {
			return "", fmt.Errorf("spec.secrets %s: secret %s/%s: %w", s.Name, fn.Namespace, s.SecretKeyRef.Name, err)
		}
		h.Write([]byte(s.Name))
		h.Write(sec.Data[s.SecretKeyRef.Key])
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// deployOn stores the function's secrets on a node and deploys the bundle there; it returns
// the version the node serves.
func (r *FunctionReconciler) deployOn(ctx context.Context, fn *zygov1.Function, nodeName string, b []byte) (string, error) {
	node, err := getNode(ctx, r.Client, nodeName)
	if err != nil {
		return "", err
	}
	a, err := r.Dialer.Agent(ctx, node)
	if err != nil {
		return "", err
	}
	sctx, scancel := context.WithTimeout(ctx, agentCallTimeout) // secret puts are small: a hung node fails them fast
	_, err = pushSecrets(sctx, r.Client, a, fn.Namespace, fn.Spec.Secrets, "spec.secrets")
	scancel()
	if err != nil {
		return "", fmt.Errorf("node %s: %w", nodeName, err)
	}
	cctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	res, err := a.Deploy(cctx, bytes.NewReader(b))
	if err != nil {
		return "", fmt.Errorf("deploying on node %s: %w", nodeName, err)
	}
	log.FromContext(ctx).Info("function deployed", "node", nodeName, "version", res.Version, "unchanged", res.Unchanged)
	removeLegacyFunction(ctx, a, fn)
	return res.Version, nil
}

// removeFrom removes the function from the nodes named (skipping those not Ready: it is lost
// with them, or removed when they are asked again).
func (r *FunctionReconciler) removeFrom(ctx context.Context, fn *zygov1.Function, names []string) error {
	var errs []error
	for _, name := range names {
		node, err := getNode(ctx, r.Client, name)
		if err != nil || !nodeReady(node) {
			continue
		}
		a, err := r.Dialer.Agent(ctx, node)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
		err = a.RemoveFunction(cctx, nodeFunctionName(fn.Namespace, fn.Name))
		cancel()
		if err != nil && !zygo.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing the function from node %s: %w", name, err))
			continue
		}
		removeLegacyFunction(ctx, a, fn)
		releaseSecrets(ctx, r.Client, a, name, fn.Namespace, fn.Spec.Secrets, fn.UID) // secretgc.go
	}
	return errors.Join(errs...)
}

// removeLegacyFunction removes fn from agent a under the name an older controller gave it
// (legacyNodeFunctionName), if it is there; an error is logged, not returned.
func removeLegacyFunction(ctx context.Context, a Agent, fn *zygov1.Function) {
	cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	defer cancel()
	if err := a.RemoveFunction(cctx, legacyNodeFunctionName(fn.Namespace, fn.Name)); err != nil && !zygo.IsNotFound(err) {
		log.FromContext(ctx).Info("removing the function's old node name failed", "error", err)
	}
}

// SetupWithManager registers the reconciler; a ZygoNode's change requeues every Function (a
// node that died or came back changes where they are served).
func (r *FunctionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&zygov1.Function{}).Named("function").
		WithOptions(controller.Options{MaxConcurrentReconciles: reconcileWorkers}).
		Watches(&zygov1.ZygoNode{}, handler.EnqueueRequestsFromMapFunc(r.allFunctions), builder.WithPredicates(readinessChanged())).
		Complete(r)
}

func (r *FunctionReconciler) allFunctions(ctx context.Context, _ client.Object) []reconcile.Request {
	var list zygov1.FunctionList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, f := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&f)})
	}
	return out
}

// nodeNames returns the names of ns.
func nodeNames(ns []zygov1.FunctionNode) []string {
	out := make([]string, 0, len(ns))
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return out
}
