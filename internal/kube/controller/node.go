package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// ProbeEvery is how often the controller checks that each node agent answers.
const ProbeEvery = 15 * time.Second

// agentCallTimeout bounds one call to an agent that is not a create, fork or deploy.
const agentCallTimeout = 10 * time.Second

// patchStatus writes obj's status (a merge patch from before) when it differs from the old one
// (oldStatus, newStatus): a reconcile that observed nothing new costs the API server nothing.
func patchStatus(ctx context.Context, c client.Client, obj, before client.Object, oldStatus, newStatus any) error {
	if equality.Semantic.DeepEqual(oldStatus, newStatus) {
		return nil
	}
	return c.Status().Patch(ctx, obj, client.MergeFrom(before))
}

// setCondition sets a condition of conds (by type) with the object's generation; it reports
// whether anything changed.
func setCondition(conds *[]metav1.Condition, gen int64, typ string, ok bool, reason, msg string) bool {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	if len(msg) > 1024 { // a condition's message is bounded by its schema (32768); keep status small
		msg = msg[:1021] + "..."
	}
	return meta.SetStatusCondition(conds, metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, ObservedGeneration: gen})
}

// NodeReconciler probes each ZygoNode's agent and writes its Ready condition.
type NodeReconciler struct {
	Client client.Client
	Dialer Dialer
	Now    func() time.Time // nil: time.Now
	// SecretGrace is how old a secret must be before a probe may collect it (secretgc.go);
	// 0: DefaultSecretGrace.
	SecretGrace time.Duration
}

// Reconcile probes one agent and requeues after ProbeEvery.
func (r *NodeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var n zygov1.ZygoNode
	if err := r.Client.Get(ctx, req.NamespacedName, &n); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if n.DeletionTimestamp != nil {
		return r.finalize(ctx, &n)
	}
	if controllerutil.AddFinalizer(&n, Finalizer) {
		if err := r.Client.Update(ctx, &n); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer to node %s: %w", n.Name, err)
		}
	}
	before := n.DeepCopy()
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	ok, reason, msg := r.probe(ctx, &n)
	if ok {
		t := metav1.NewTime(now())
		n.Status.LastSeen = &t
		if err := r.collect(ctx, &n); err != nil {
			log.FromContext(ctx).Info("collecting leftover sandboxes failed", "node", n.Name, "error", err)
		}
		if err := r.collectSecrets(ctx, &n, now()); err != nil {
			log.FromContext(ctx).Info("collecting unused secrets failed", "node", n.Name, "error", err)
		}
	}
	setCondition(&n.Status.Conditions, n.Generation, zygov1.ConditionReady, ok, reason, msg)
	if err := r.Client.Status().Patch(ctx, &n, client.MergeFrom(before)); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing the status of node %s: %w", n.Name, err)
	}
	return ctrl.Result{RequeueAfter: ProbeEvery}, nil
}

// finalize lets a deleted ZygoNode go when its agent does not answer (what is on it is lost
// with it: the Sandboxes and Checkpoints placed there then drop their finalizers without
// asking) or when no Sandbox or Checkpoint is placed on it any more. While its agent answers
// and some are, it stays, Ready=False reason Deleting naming them, and is retried every
// 2 s: delete them first (each removes its own state on the node).
func (r *NodeReconciler) finalize(ctx context.Context, n *zygov1.ZygoNode) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(n, Finalizer) {
		return ctrl.Result{}, nil
	}
	placed, err := r.placedOn(ctx, n.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(placed) > 0 {
		if ok, _, _ := r.probe(ctx, n); ok {
			before := n.DeepCopy()
			if len(placed) > 5 {
				placed = append(placed[:5], fmt.Sprintf("and %d more", len(placed)-5))
			}
			setCondition(&n.Status.Conditions, n.Generation, zygov1.ConditionReady, false, zygov1.ReasonDeleting,
				fmt.Sprintf("deleted while its agent answers and still holds %s: delete those first; nothing new is placed here", strings.Join(placed, ", ")))
			if err := r.Client.Status().Patch(ctx, n, client.MergeFrom(before)); err != nil {
				return ctrl.Result{}, fmt.Errorf("writing the status of node %s: %w", n.Name, err)
			}
			return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
		}
		log.FromContext(ctx).Info("deleted node's agent does not answer: what is placed on it is lost", "node", n.Name, "objects", placed)
	}
	controllerutil.RemoveFinalizer(n, Finalizer)
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, n))
}

// placedOn names the Sandboxes and Checkpoints ("Kind ns/name") whose status records node.
func (r *NodeReconciler) placedOn(ctx context.Context, node string) ([]string, error) {
	var sbs agentsv1.SandboxList
	if err := r.Client.List(ctx, &sbs); err != nil {
		return nil, fmt.Errorf("listing Sandboxes: %w", err)
	}
	var cks zygov1.CheckpointList
	if err := r.Client.List(ctx, &cks); err != nil {
		return nil, fmt.Errorf("listing Checkpoints: %w", err)
	}
	var out []string
	for _, s := range sbs.Items {
		if s.Status.NodeName == node {
			out = append(out, "Sandbox "+s.Namespace+"/"+s.Name)
		}
	}
	for _, c := range cks.Items {
		if c.Status.NodeName == node {
			out = append(out, "Checkpoint "+c.Namespace+"/"+c.Name)
		}
	}
	return out, nil
}

// probe calls the agent's status and says what to record.
func (r *NodeReconciler) probe(ctx context.Context, n *zygov1.ZygoNode) (ok bool, reason, msg string) {
	a, err := r.Dialer.Agent(ctx, n)
	if err != nil {
		return false, zygov1.ReasonTokenMissing, err.Error()
	}
	cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	defer cancel()
	st, err := a.Status(cctx)
	if err != nil {
		return false, zygov1.ReasonAgentUnreachable, fmt.Sprintf("GET /v1/status on %s: %v", n.Spec.Address, err)
	}
	n.Status.Version = st.Version
	return true, zygov1.ReasonAgentReady, fmt.Sprintf("zygo %s answers on %s", st.Version, n.Spec.Address)
}

// collect removes the sandboxes the controller made on the node whose object no longer
// exists: those deleted while the node did not answer, and copies a fork made and did not
// record (the controller died before its status write) once the fork is gone. What the
// controller makes is named for its object: "k8s-" + a Sandbox's UID (a create, a warm
// claim's copy) or forkCopyName (a SandboxFork's copy). A sandbox of such a name is kept
// while a Sandbox's status records its id on this node (copies made before the controller
// named them, named by the agent "k8s-UID-XXXXXXXX" after their source, are kept this way).
// The agent's records are listed before the objects: a sandbox made for an object that exists
// is never taken for a leftover.
func (r *NodeReconciler) collect(ctx context.Context, n *zygov1.ZygoNode) error {
	a, err := r.Dialer.Agent(ctx, n)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	defer cancel()
	recs, err := a.ListSandboxes(cctx)
	if err != nil {
		return fmt.Errorf("listing the node's sandboxes: %w", err)
	}
	var sbs agentsv1.SandboxList
	if err := r.Client.List(ctx, &sbs); err != nil {
		return fmt.Errorf("listing Sandboxes: %w", err)
	}
	var forks zygov1.SandboxForkList
	if err := r.Client.List(ctx, &forks); err != nil {
		return fmt.Errorf("listing SandboxForks: %w", err)
	}
	live := map[string]bool{} // names k8s-UID, fork copy names and recorded ids
	for _, s := range sbs.Items {
		live["k8s-"+string(s.UID)] = true
		if id := s.Status.Zygo.SandboxID; id != "" && s.Status.NodeName == n.Name {
			live[id] = true
		}
	}
	for i := range forks.Items {
		for _, name := range forkCopyNames(&forks.Items[i]) {
			live[name] = true
		}
		for _, ch := range forks.Items[i].Status.Children {
			if ch.SandboxID != "" && forks.Items[i].Status.NodeName == n.Name {
				live[ch.SandboxID] = true // recorded, its Sandbox not made yet
			}
		}
	}
	var errs []error
	for _, rec := range recs {
		if strings.HasPrefix(rec.Name, "k8s-") && !live[rec.Name] && !live[rec.ID] {
			log.FromContext(ctx).Info("removing a leftover sandbox", "node", n.Name, "sandbox", rec.Name, "copy", rec.ParentID != "")
			if err := a.RemoveSandbox(cctx, rec.ID); err != nil && !zygo.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// collectSecrets removes the node's unused secrets of the controller's naming (secretgc.go).
func (r *NodeReconciler) collectSecrets(ctx context.Context, n *zygov1.ZygoNode, now time.Time) error {
	a, err := r.Dialer.Agent(ctx, n)
	if err != nil {
		return err
	}
	grace := r.SecretGrace
	if grace <= 0 {
		grace = DefaultSecretGrace
	}
	return collectSecrets(ctx, r.Client, a, n.Name, now, grace)
}

// SetupWithManager registers the reconciler.
func (r *NodeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&zygov1.ZygoNode{}).Named("zygonode").Complete(r)
}

// nodeReady reports whether n's last probe succeeded.
func nodeReady(n *zygov1.ZygoNode) bool {
	return meta.IsStatusConditionTrue(n.Status.Conditions, zygov1.ConditionReady)
}

// errNoReadyNode is returned by pickNodes when no node can take work.
var errNoReadyNode = errors.New("no ZygoNode is Ready")

// readyNodes returns the Ready ZygoNodes, by name.
func readyNodes(ctx context.Context, c client.Reader) ([]zygov1.ZygoNode, error) {
	var list zygov1.ZygoNodeList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing ZygoNodes: %w", err)
	}
	var out []zygov1.ZygoNode
	for _, n := range list.Items {
		if nodeReady(&n) && n.DeletionTimestamp == nil {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b zygov1.ZygoNode) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// pickNode returns the Ready node holding the fewest Sandboxes (ties: by name), skipping
// those in avoid; errNoReadyNode when there is none.
func pickNode(ctx context.Context, c client.Reader, avoid map[string]bool) (*zygov1.ZygoNode, error) {
	nodes, err := readyNodes(ctx, c)
	if err != nil {
		return nil, err
	}
	var sbs agentsv1.SandboxList
	if err := c.List(ctx, &sbs); err != nil {
		return nil, fmt.Errorf("listing Sandboxes: %w", err)
	}
	load := map[string]int{}
	for _, s := range sbs.Items {
		load[s.Status.NodeName]++
	}
	var best *zygov1.ZygoNode
	for i := range nodes {
		n := &nodes[i]
		if avoid[n.Name] {
			continue
		}
		if best == nil || load[n.Name] < load[best.Name] {
			best = n
		}
	}
	if best == nil {
		return nil, errNoReadyNode
	}
	return best, nil
}

// getNode returns the ZygoNode named name.
func getNode(ctx context.Context, c client.Reader, name string) (*zygov1.ZygoNode, error) {
	var n zygov1.ZygoNode
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		return nil, fmt.Errorf("reading ZygoNode %s: %w", name, err)
	}
	return &n, nil
}

// readinessChanged passes a ZygoNode event only when the node appears, goes, or its Ready
// condition flips: the probe's heartbeat (lastSeen) requeues nothing.
func readinessChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*zygov1.ZygoNode)
		n, ok2 := e.ObjectNew.(*zygov1.ZygoNode)
		return !ok1 || !ok2 || nodeReady(o) != nodeReady(n)
	}}
}
