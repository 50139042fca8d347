package controller

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	extv1 "github.com/zygo-run/zygo/internal/kube/api/extensions/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// Finalizer is on every Sandbox, Checkpoint and Function: its removal waits for the node
// agents to drop what the object made.
const Finalizer = "zygo.run/cleanup"

// AnnotationForkFrom on a Sandbox asks for a copy of a sandbox instead of a fresh create:
// "NODE/SANDBOX-ID/CHECKPOINT" (a claim served from a warm pool sets it).
const AnnotationForkFrom = "zygo.run/fork-from"

// createTimeout bounds a create or fork call (a gVisor start, a restore and a reseal).
const createTimeout = 2 * time.Minute

// nodeSandboxName is the Zygo sandbox name of a Sandbox made by a create: deterministic, so a
// create whose answer was lost is found again on its node instead of made twice.
func nodeSandboxName(sb *agentsv1.Sandbox) string { return "k8s-" + string(sb.UID) }

// SandboxReconciler keeps each Sandbox's Zygo sandbox on its node, its access Secret
// (access.go) and its status true.
type SandboxReconciler struct {
	Client client.Client
	Dialer Dialer
	// Namespace is the controller's, holding the agents' CA Secrets (copied into the access
	// Secrets of sandboxes on agents serving TLS).
	Namespace string
	Now       func() time.Time // nil: time.Now

	ops  createOps               // creates and forks under way (sandboxcreate.go)
	wake chan event.GenericEvent // requeues a Sandbox whose op ended; nil without a manager
}

func (r *SandboxReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile makes, adopts, observes, expires or removes one Sandbox's Zygo sandbox.
func (r *SandboxReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var sb agentsv1.Sandbox
	if err := r.Client.Get(ctx, req.NamespacedName, &sb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	expired := sb.Spec.ShutdownTime != nil && !r.now().Before(sb.Spec.ShutdownTime.Time)
	if (sb.DeletionTimestamp != nil || expired) && r.opRunning(&sb) {
		return ctrl.Result{RequeueAfter: time.Second}, nil // remove what it makes once it answers
	}
	if sb.DeletionTimestamp != nil {
		return ctrl.Result{}, r.finalize(ctx, &sb)
	}
	if controllerutil.AddFinalizer(&sb, Finalizer) {
		if err := r.Client.Update(ctx, &sb); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
	}
	if expired {
		return r.expire(ctx, &sb)
	}
	before := sb.DeepCopy()
	res, err := r.sync(ctx, &sb)
	if perr := patchStatus(ctx, r.Client, &sb, before, before.Status, sb.Status); perr != nil {
		return ctrl.Result{}, errors.Join(err, fmt.Errorf("writing the status: %w", perr))
	}
	return res, err
}

// sync brings sb's Zygo sandbox into being or observes it, writing sb.Status (the caller
// patches it). It returns an error only for what a retry may cure.
func (r *SandboxReconciler) sync(ctx context.Context, sb *agentsv1.Sandbox) (ctrl.Result, error) {
	if sb.Status.Zygo.SandboxID == "" && r.ops.get(sb.UID) == nil { // an op started after a passing check
		// Annotations are user-writable: what they name on a node is acted on only when the
		// controller recorded it for this object (trustedAnnotations); nothing else is touched.
		// Checked on every pass until the sandbox is made, not only before placement: an
		// annotation changed between placement and the create is checked again.
		if why, err := r.trustedAnnotations(ctx, sb); err != nil {
			return ctrl.Result{}, err
		} else if why != "" {
			ready(sb, false, agentsv1.ReasonInvalidSpec, why+"; nothing on any node was touched")
			// Rechecked: a SandboxFork's status may reach this cache after its copy's Sandbox.
			return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
		}
		if node, id := sb.Annotations[agentsv1.AnnotationNode], sb.Annotations[agentsv1.AnnotationSandboxID]; node != "" && id != "" && sb.Status.NodeName == "" {
			sb.Status.NodeName, sb.Status.Zygo.SandboxID = node, id // adopt a copy made by a fork
		}
	}
	if sb.Status.NodeName == "" { // place it
		node, err := r.place(ctx, sb)
		if err != nil {
			ready(sb, false, agentsv1.ReasonNoReadyNode, err.Error())
			return ctrl.Result{RequeueAfter: ProbeEvery}, nil
		}
		// The node is recorded before the create: a create whose answer is lost is looked
		// for there (by its deterministic name), never made again on another node.
		sb.Status.NodeName = node
		ready(sb, false, agentsv1.ReasonCreating, "creating the sandbox on node "+node)
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	node, err := getNode(ctx, r.Client, sb.Status.NodeName)
	if err != nil {
		ready(sb, false, agentsv1.ReasonNodeLost, err.Error())
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	a, err := r.Dialer.Agent(ctx, node)
	if err != nil {
		ready(sb, false, agentsv1.ReasonNodeUnreachable, err.Error())
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	sb.Status.Zygo.AgentAddress = node.Spec.Address
	if sb.Status.Zygo.SandboxID == "" {
		return r.make(ctx, sb, node, a)
	}
	return r.observe(ctx, sb, node, a)
}

// trustedAnnotations checks the annotations of a Sandbox not yet made that name node-side
// state. Adoption (zygo.run/node + zygo.run/sandbox-id) needs sb to be controlled by a
// SandboxFork of its namespace whose status (written by the controller) lists this very copy
// on that node; zygo.run/fork-from needs a warm pool source Sandbox of sb's namespace whose
// status records that node, sandbox id and warm checkpoint (status.zygo.warmCheckpointID).
// Only status, which the controller alone writes, vouches for a value. It returns why the
// annotations are refused ("" when trusted), or an error for what a retry may cure.
func (r *SandboxReconciler) trustedAnnotations(ctx context.Context, sb *agentsv1.Sandbox) (string, error) {
	node, id := sb.Annotations[agentsv1.AnnotationNode], sb.Annotations[agentsv1.AnnotationSandboxID]
	if node != "" || id != "" {
		if why, err := r.adoptionRecorded(ctx, sb, node, id); why != "" || err != nil {
			return why, err
		}
	}
	if from := sb.Annotations[AnnotationForkFrom]; from != "" {
		if why, err := r.forkSourceRecorded(ctx, sb, from); why != "" || err != nil {
			return why, err
		}
	}
	return "", nil
}

// adoptionRecorded says why sb may not adopt sandbox id on node ("" when its controlling
// SandboxFork recorded that copy as sb).
func (r *SandboxReconciler) adoptionRecorded(ctx context.Context, sb *agentsv1.Sandbox, node, id string) (string, error) {
	refused := fmt.Sprintf("annotations %s %q and %s %q: not a copy the controller made for this Sandbox",
		agentsv1.AnnotationNode, node, agentsv1.AnnotationSandboxID, id)
	owner := metav1.GetControllerOf(sb)
	if owner == nil || owner.Kind != "SandboxFork" || owner.APIVersion != zygov1.GroupVersion.String() {
		return refused + " (no controlling SandboxFork)", nil
	}
	var f zygov1.SandboxFork
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: owner.Name}, &f); err != nil {
		if apierrors.IsNotFound(err) {
			return refused + " (SandboxFork " + owner.Name + " does not exist)", nil
		}
		return "", fmt.Errorf("reading SandboxFork %s: %w", owner.Name, err)
	}
	if f.UID != owner.UID || f.Status.NodeName != node {
		return refused, nil
	}
	for _, ch := range f.Status.Children {
		if ch.Sandbox == sb.Name && ch.SandboxID == id {
			return "", nil
		}
	}
	return refused + " (SandboxFork " + f.Name + " records no such copy)", nil
}

// forkSourceRecorded says why from ("NODE/ID/CHECKPOINT") is not a warm source of sb's
// namespace ("" when it is one).
func (r *SandboxReconciler) forkSourceRecorded(ctx context.Context, sb *agentsv1.Sandbox, from string) (string, error) {
	parts := strings.SplitN(from, "/", 3)
	if len(parts) != 3 {
		return fmt.Sprintf("annotation %s %q: want NODE/SANDBOX-ID/CHECKPOINT", AnnotationForkFrom, from), nil
	}
	var srcs agentsv1.SandboxList
	if err := r.Client.List(ctx, &srcs, client.InNamespace(sb.Namespace), client.HasLabels{extv1.LabelWarmPool}); err != nil {
		return "", fmt.Errorf("listing warm sources: %w", err)
	}
	for _, s := range srcs.Items {
		if isWarmSource(&s) && s.Name != sb.Name &&
			s.Status.NodeName == parts[0] && s.Status.Zygo.SandboxID == parts[1] && s.Status.Zygo.WarmCheckpointID == parts[2] {
			return "", nil
		}
	}
	return fmt.Sprintf("annotation %s %q: not a warm pool source of namespace %s that the controller recorded", AnnotationForkFrom, from, sb.Namespace), nil
}

// place returns the node sb goes on: spec.nodeName if Ready, the fork source's node, or the
// least loaded Ready node.
func (r *SandboxReconciler) place(ctx context.Context, sb *agentsv1.Sandbox) (string, error) {
	want := sb.Spec.NodeName
	if from := sb.Annotations[AnnotationForkFrom]; from != "" {
		want, _, _ = strings.Cut(from, "/")
	}
	if want != "" {
		n, err := getNode(ctx, r.Client, want)
		if err != nil {
			return "", err
		}
		if !nodeReady(n) {
			return "", fmt.Errorf("ZygoNode %s is not Ready: %s", want, conditionMessage(n.Status.Conditions, zygov1.ConditionReady))
		}
		return want, nil
	}
	n, err := pickNode(ctx, r.Client, nil)
	if err != nil {
		return "", err
	}
	return n.Name, nil
}

// make creates (or forks) the Zygo sandbox on its node, outside the reconcile's worker when
// the agent is slow (runCreate).
func (r *SandboxReconciler) make(ctx context.Context, sb *agentsv1.Sandbox, node *zygov1.ZygoNode, a Agent) (ctrl.Result, error) {
	if from := sb.Annotations[AnnotationForkFrom]; from != "" {
		parts := strings.SplitN(from, "/", 3)
		if len(parts) != 3 || parts[0] != node.Name {
			ready(sb, false, agentsv1.ReasonInvalidSpec, fmt.Sprintf("annotation %s %q: want NODE/SANDBOX-ID/CHECKPOINT on node %s", AnnotationForkFrom, from, node.Name))
			return ctrl.Result{}, nil
		}
		name := nodeSandboxName(sb)
		return r.runCreate(ctx, sb, node.Name, func(cctx context.Context) outcome {
			return r.forkOne(cctx, node, a, parts[1], parts[2], name)
		})
	}
	want := sb.DeepCopy() // the spec as this pass saw it
	return r.runCreate(ctx, sb, node.Name, func(cctx context.Context) outcome {
		return r.create(cctx, want, node, a)
	})
}

// create makes want's Zygo sandbox on node (or finds it made by an earlier try whose answer
// was lost) and returns how to record the outcome.
func (r *SandboxReconciler) create(ctx context.Context, want *agentsv1.Sandbox, node *zygov1.ZygoNode, a Agent) outcome {
	failed := func(doing string, err error) outcome {
		return func(_ context.Context, sb *agentsv1.Sandbox) (ctrl.Result, error) {
			return r.agentFailed(sb, node, doing, err)
		}
	}
	made := func(rec wire.Sandbox) outcome {
		return func(ctx context.Context, sb *agentsv1.Sandbox) (ctrl.Result, error) {
			return r.recordAndGrant(ctx, sb, node, a, rec)
		}
	}
	name := nodeSandboxName(want)
	lctx, lcancel := context.WithTimeout(ctx, agentCallTimeout) // a lookup, not a create: a hung node fails it fast
	rec, err := a.GetSandbox(lctx, name)
	lcancel()
	if err == nil { // made before the last answer was lost
		return made(rec)
	} else if !zygo.IsNotFound(err) {
		return failed("looking for sandbox "+name, err)
	}
	opts, err := r.options(ctx, want, a)
	if err != nil {
		var snf *errSecretNotFound
		if errors.As(err, &snf) {
			return func(_ context.Context, sb *agentsv1.Sandbox) (ctrl.Result, error) {
				ready(sb, false, agentsv1.ReasonSecretNotFound, snf.Error())
				return ctrl.Result{RequeueAfter: ProbeEvery}, nil
			}
		}
		return failed("storing the sandbox's secrets", err)
	}
	opts.Name = name
	rec, err = a.CreateSandbox(ctx, opts)
	if err != nil {
		return failed("creating the sandbox", err)
	}
	log.FromContext(ctx).Info("sandbox created", "node", node.Name, "sandbox_id", rec.ID)
	return made(rec)
}

// forkOne makes a resealed copy of sandbox id from checkpoint cp on node, named name (the
// claim's Sandbox's nodeSandboxName: a copy made by a try whose answer was lost is found
// again by it, as a create's), and returns how to record it.
func (r *SandboxReconciler) forkOne(ctx context.Context, node *zygov1.ZygoNode, a Agent, id, cp, name string) outcome {
	record := func(rec wire.Sandbox) outcome {
		return func(ctx context.Context, sb *agentsv1.Sandbox) (ctrl.Result, error) {
			return r.recordAndGrant(ctx, sb, node, a, rec)
		}
	}
	lctx, lcancel := context.WithTimeout(ctx, agentCallTimeout)
	rec, err := a.GetSandbox(lctx, name)
	lcancel()
	if err == nil && rec.Name == name {
		return record(rec) // made before the last answer was lost
	}
	if err == nil || zygo.IsNotFound(err) {
		var ans wire.ForkAnswer
		ans, err = a.ForkWith(ctx, id, wire.ForkBody{N: 1, From: cp, Names: []string{name}}, nil)
		if err == nil && (len(ans.Children) != 1 || ans.Children[0].Sandbox == nil) {
			err = errors.New("the fork answered no running copy")
		}
		if err == nil {
			return record(*ans.Children[0].Sandbox)
		}
	}
	return func(_ context.Context, sb *agentsv1.Sandbox) (ctrl.Result, error) {
		return r.agentFailed(sb, node, "forking warm sandbox "+id, err)
	}
}

// options turns sb's spec into the agent's create options, storing its secrets on the agent.
func (r *SandboxReconciler) options(ctx context.Context, sb *agentsv1.Sandbox, a Agent) (wire.CreateSandboxBody, error) {
	z := sb.Spec.Zygo
	var o wire.CreateSandboxBody
	names, err := pushSecrets(ctx, r.Client, a, sb.Namespace, z.Secrets, "spec.zygo.secrets")
	if err != nil {
		return o, err
	}
	o.Secrets = names
	for _, e := range z.Env {
		o.Env = append(o.Env, e.Name+"="+e.Value)
	}
	if q := z.Limits.Memory; q != nil {
		o.MemoryMiB = int(math.Ceil(float64(q.Value()) / (1 << 20)))
	}
	if q := z.Limits.CPU; q != nil {
		o.CPUs = float64(q.MilliValue()) / 1000
	}
	if p := z.Limits.PIDs; p != nil {
		o.PIDs = int(*p)
	}
	for _, s := range z.Services {
		o.Services = append(o.Services, wire.Service{Name: s.Name, Argv: s.Argv, OnFork: s.OnFork})
	}
	if n := z.Network; n != nil {
		o.Network = &wire.SandboxNetwork{Mode: n.Mode, Allow: n.Allow, Deny: n.Deny}
	}
	return o, nil
}

// observe refreshes sb's status from its node.
func (r *SandboxReconciler) observe(ctx context.Context, sb *agentsv1.Sandbox, node *zygov1.ZygoNode, a Agent) (ctrl.Result, error) {
	cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	defer cancel()
	rec, err := a.GetSandbox(cctx, sb.Status.Zygo.SandboxID)
	if err == nil {
		if why, oerr := r.notOwned(ctx, sb, rec); oerr != nil {
			return ctrl.Result{}, oerr
		} else if why != "" {
			ready(sb, false, agentsv1.ReasonSandboxNotOwned, why+"; nothing was minted or recorded for it")
			return ctrl.Result{RequeueAfter: ProbeEvery}, nil
		}
	}
	switch {
	case zygo.IsNotFound(err):
		ready(sb, false, agentsv1.ReasonSandboxGone, fmt.Sprintf("node %s has no sandbox %s any more", node.Name, sb.Status.Zygo.SandboxID))
		sb.Status.PodIPs = nil
		return ctrl.Result{}, nil
	case err != nil && isUnreachable(err):
		ready(sb, false, agentsv1.ReasonNodeLost, fmt.Sprintf("node %s does not answer (%v): a sandbox's memory lives on its node, so it is lost while the node is", node.Name, err))
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	case err != nil:
		return r.agentFailed(sb, node, "reading the sandbox", err)
	}
	return r.recordAndGrant(ctx, sb, node, a, rec)
}

// record writes what the agent said of the sandbox into sb's status.
func (r *SandboxReconciler) record(sb *agentsv1.Sandbox, node *zygov1.ZygoNode, rec wire.Sandbox) {
	z := &sb.Status.Zygo
	z.SandboxID, z.Generation, z.ParentID, z.CheckpointID, z.State = rec.ID, rec.Generation, rec.ParentID, rec.CheckpointID, rec.State
	z.AgentAddress = node.Spec.Address
	sb.Status.NodeName = node.Name
	sb.Status.PodIPs = nil
	if rec.Address != "" {
		sb.Status.PodIPs = []string{rec.Address}
	}
	if rec.State == "running" {
		ready(sb, true, agentsv1.ReasonRunning, fmt.Sprintf("sandbox %s runs on node %s", rec.ID, node.Name))
		return
	}
	msg := fmt.Sprintf("sandbox %s is %s on node %s", rec.ID, rec.State, node.Name)
	if rec.Error != "" {
		msg += ": " + rec.Error
	}
	ready(sb, false, agentsv1.ReasonCreating, msg)
}

// agentFailed records an agent's error as a condition; errors worth retrying soon are
// requeued after ProbeEvery, a refusal (400) is not retried until the object changes.
func (r *SandboxReconciler) agentFailed(sb *agentsv1.Sandbox, node *zygov1.ZygoNode, doing string, err error) (ctrl.Result, error) {
	msg := fmt.Sprintf("%s on node %s: %v", doing, node.Name, err)
	switch {
	case isUnreachable(err):
		ready(sb, false, agentsv1.ReasonNodeUnreachable, msg)
	case zygo.IsBadRequest(err):
		ready(sb, false, agentsv1.ReasonInvalidSpec, msg)
		return ctrl.Result{}, nil
	case zygo.IsUnavailable(err):
		ready(sb, false, agentsv1.ReasonAgentUnavailable, msg)
	default:
		ready(sb, false, agentsv1.ReasonCreateFailed, msg)
	}
	return ctrl.Result{RequeueAfter: ProbeEvery}, nil
}

// expire removes sb's Zygo sandbox once its shutdownTime passed and applies its policy.
func (r *SandboxReconciler) expire(ctx context.Context, sb *agentsv1.Sandbox) (ctrl.Result, error) {
	if err := r.removeOnNode(ctx, sb); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.removeAccess(ctx, sb); err != nil {
		return ctrl.Result{}, err
	}
	if p := sb.Spec.ShutdownPolicy; p != nil && *p == agentsv1.ShutdownPolicyDelete {
		return ctrl.Result{}, client.IgnoreNotFound(r.Client.Delete(ctx, sb))
	}
	before := sb.DeepCopy()
	sb.Status.PodIPs, sb.Status.Zygo.State, sb.Status.Zygo.AccessSecretName = nil, "", ""
	ready(sb, false, agentsv1.ReasonExpired, "shutdownTime passed: the sandbox was removed")
	return ctrl.Result{}, r.Client.Status().Patch(ctx, sb, client.MergeFrom(before))
}

// finalize removes the Zygo sandbox from its node and its access Secret, then the finalizer.
func (r *SandboxReconciler) finalize(ctx context.Context, sb *agentsv1.Sandbox) error {
	if !controllerutil.ContainsFinalizer(sb, Finalizer) {
		return nil
	}
	if err := r.removeOnNode(ctx, sb); err != nil {
		return err
	}
	if err := r.removeAccess(ctx, sb); err != nil {
		return err
	}
	controllerutil.RemoveFinalizer(sb, Finalizer)
	return client.IgnoreNotFound(r.Client.Update(ctx, sb))
}

// removeOnNode removes sb's Zygo sandbox (by id, or by its deterministic name when a create
// may have landed unrecorded). Only a node whose ZygoNode no longer exists cannot be asked:
// the sandbox is lost with it. A node that exists but does not answer is retried (the error)
// until it answers or its ZygoNode is deleted.
func (r *SandboxReconciler) removeOnNode(ctx context.Context, sb *agentsv1.Sandbox) error {
	if sb.Status.NodeName == "" {
		return nil
	}
	node, err := getNode(ctx, r.Client, sb.Status.NodeName)
	if apierrors.IsNotFound(err) {
		log.FromContext(ctx).Info("sandbox's ZygoNode is gone: not removing on it", "node", sb.Status.NodeName)
		return nil
	} else if err != nil {
		return err
	}
	a, err := r.Dialer.Agent(ctx, node)
	if err != nil {
		return err
	}
	id := sb.Status.Zygo.SandboxID
	if id == "" {
		id = nodeSandboxName(sb) // a create's or a warm claim's copy whose answer was lost
	}
	cctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	if id != nodeSandboxName(sb) {
		rec, err := a.GetSandbox(cctx, id)
		switch {
		case err != nil && !zygo.IsNotFound(err):
			return fmt.Errorf("reading sandbox %s on node %s before removing it: %w", id, node.Name, err)
		case err == nil:
			if why, err := r.notOwned(ctx, sb, rec); err != nil {
				return err
			} else if why != "" {
				// A forged status: the sandbox named is another's. Only this object's own
				// (by its deterministic name, if a create made one) is removed.
				log.FromContext(ctx).Info("not removing a sandbox that is not this Sandbox's", "node", node.Name, "sandbox_id", id, "why", why)
				id = nodeSandboxName(sb)
			}
		}
	}
	if err := a.RemoveSandbox(cctx, id); err != nil && !zygo.IsNotFound(err) {
		return fmt.Errorf("removing sandbox %s on node %s: %w", id, node.Name, err)
	}
	cp := sb.Status.Zygo.WarmCheckpointID // a warm pool's source keeps an image (recorded by the controller)
	if cp != "" {
		// Only the image this source took (tag warm-UID): a status written by someone else
		// may name another namespace's.
		mine, err := imageTagged(cctx, a, cp, "warm-"+string(sb.UID))
		if err != nil {
			return err
		}
		if !mine {
			log.FromContext(ctx).Info("status.zygo.warmCheckpointID names an image this Sandbox did not take: not removing it", "checkpoint", cp, "node", node.Name)
			cp = ""
		}
	}
	if cp != "" {
		err := a.RemoveCheckpoint(cctx, cp)
		switch {
		case zygo.IsConflict(err):
			// Claims' copies restored from it still run: the agent keeps an image its
			// sandboxes come from. It stays on the node (docs/kubernetes.md, known gaps).
			log.FromContext(ctx).Info("warm checkpoint still used by copies; left on the node", "checkpoint", cp, "node", node.Name)
		case err != nil && !zygo.IsNotFound(err):
			return fmt.Errorf("removing warm checkpoint %s on node %s: %w", cp, node.Name, err)
		}
	}
	releaseSecrets(ctx, r.Client, a, node.Name, sb.Namespace, sb.Spec.Zygo.Secrets, sb.UID) // secretgc.go
	return nil
}

// notOwned says why the agent's record rec is not sb's ("" when it is). Every sandbox the
// controller makes is named for the object it is made for, and UIDs are unique in the
// cluster: a create's or a warm claim's copy is nodeSandboxName(sb); a SandboxFork's copy is
// forkCopyName(fork UID, index), where the fork is the one of sb's namespace that controls sb
// (its UID, not only its name, matches the owner reference) and whose status (written by the
// controller alone) records sb as that index. No annotation is trusted for identity: a status
// naming another namespace's sandbox, created or copied, never passes. rec is read by id, so
// its fields are the agent's. The error is for what a retry may cure (reading the fork).
func (r *SandboxReconciler) notOwned(ctx context.Context, sb *agentsv1.Sandbox, rec wire.Sandbox) (string, error) {
	if rec.Name == nodeSandboxName(sb) {
		return "", nil
	}
	why := fmt.Sprintf("status.zygo.sandboxID %s names sandbox %q on node %s, not this Sandbox's (%s)", rec.ID, rec.Name, sb.Status.NodeName, nodeSandboxName(sb))
	if rec.ParentID == "" {
		return why, nil // a created sandbox: only k8s-UID is this object's
	}
	copyName, err := r.forkCopyNameOf(ctx, sb)
	if err != nil {
		return "", err
	}
	if copyName == "" {
		return why, nil
	}
	if rec.Name != copyName {
		return why + " nor this Sandbox's fork copy (" + copyName + ")", nil
	}
	return "", nil
}

// forkCopyNameOf returns the name of sb's copy when sb is a SandboxFork's copy: the fork of
// sb's namespace that controls it (same UID) records sb as its copy of index i in its status;
// "" otherwise.
func (r *SandboxReconciler) forkCopyNameOf(ctx context.Context, sb *agentsv1.Sandbox) (string, error) {
	owner := metav1.GetControllerOf(sb)
	if owner == nil || owner.Kind != "SandboxFork" || owner.APIVersion != zygov1.GroupVersion.String() {
		return "", nil
	}
	var f zygov1.SandboxFork
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: owner.Name}, &f); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("reading SandboxFork %s: %w", owner.Name, err)
	}
	if f.UID != owner.UID {
		return "", nil
	}
	for _, ch := range f.Status.Children {
		if ch.Sandbox == sb.Name && ch.SandboxID != "" {
			return forkCopyName(f.UID, int(ch.Index)), nil
		}
	}
	return "", nil
}

// isWarmSource reports whether sb is controlled by a SandboxWarmPool. An owner reference is
// user-writable: this only narrows a search; the values acted on come from sb's status.
func isWarmSource(sb *agentsv1.Sandbox) bool {
	owner := metav1.GetControllerOf(sb)
	return owner != nil && owner.Kind == "SandboxWarmPool"
}

// ready sets sb's Ready condition.
func ready(sb *agentsv1.Sandbox, ok bool, reason, msg string) {
	setCondition(&sb.Status.Conditions, sb.Generation, agentsv1.ConditionReady, ok, reason, msg)
}

// conditionMessage returns the message of the condition typ in conds ("" when absent).
func conditionMessage(conds []metav1.Condition, typ string) string {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return c.Reason + ": " + c.Message
	}
	return "no " + typ + " condition yet"
}

// SetupWithManager registers the reconciler; a ZygoNode's change requeues its Sandboxes.
func (r *SandboxReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.wake = make(chan event.GenericEvent, reconcileWorkers)
	return ctrl.NewControllerManagedBy(mgr).For(&agentsv1.Sandbox{}).Named("sandbox").
		WithOptions(controller.Options{MaxConcurrentReconciles: reconcileWorkers}).
		Watches(&zygov1.ZygoNode{}, handler.EnqueueRequestsFromMapFunc(r.sandboxesOnNode), builder.WithPredicates(readinessChanged())).
		WatchesRawSource(source.Channel(r.wake, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// sandboxesOnNode lists the Sandboxes placed on a node.
func (r *SandboxReconciler) sandboxesOnNode(ctx context.Context, o client.Object) []reconcile.Request {
	var list agentsv1.SandboxList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, s := range list.Items {
		if s.Status.NodeName == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&s)})
		}
	}
	return out
}
