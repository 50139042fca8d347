package controller

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
)

// A status written by someone else (a tenant whose Role grants */status) naming another
// Sandbox's sandbox: the controller mints nothing for it (Ready=False SandboxNotOwned) and the
// forger's deletion removes only its own sandbox, even with adoption annotations naming it. The old code minted the victim's token into
// the forger's access Secret and removed the victim's sandbox.
func TestForgedSandboxIDNotActedOn(t *testing.T) {
	ctx := context.Background()
	victim := &agentsv1.Sandbox{ObjectMeta: objMeta("victim"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	thief := &agentsv1.Sandbox{ObjectMeta: objMeta("thief"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	e := newEnv(t, victim, thief)
	r := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(r, victim)
	e.reconcile(r, thief)
	e.get(victim)
	e.get(thief)
	vid, own := victim.Status.Zygo.SandboxID, thief.Status.Zygo.SandboxID
	if vid == "" || own == "" {
		t.Fatalf("not made: %+v %+v", victim.Status, thief.Status)
	}
	// The forger also writes the adoption annotations naming the victim's sandbox: a created
	// sandbox (no parent) is nobody's copy, so they do not make it pass.
	thief.Annotations = map[string]string{agentsv1.AnnotationNode: "a", agentsv1.AnnotationSandboxID: vid}
	if err := e.c.Update(ctx, thief); err != nil {
		t.Fatal(err)
	}
	before := thief.DeepCopy()
	thief.Status.Zygo.SandboxID = vid
	if err := e.c.Status().Patch(ctx, thief, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	e.reconcile(r, thief)
	e.get(thief)
	if c := condition(t, thief.Status.Conditions, agentsv1.ConditionReady); c.Reason != agentsv1.ReasonSandboxNotOwned {
		t.Errorf("a forged sandbox id: Ready %+v, want SandboxNotOwned", c)
	}
	var s corev1.Secret
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: AccessSecretName("thief")}, &s); err == nil && string(s.Data[AccessKeySandboxID]) == vid {
		t.Errorf("the forger's access Secret names the victim's sandbox %s", vid)
	}
	if err := e.c.Delete(ctx, thief); err != nil {
		t.Fatal(err)
	}
	e.reconcile(r, thief)
	a := e.agents["a"]
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.sandboxes[vid]; !ok {
		t.Errorf("deleting the forger removed the victim's sandbox %s", vid)
	}
	if _, ok := a.sandboxes[own]; ok {
		t.Errorf("deleting the forger left its own sandbox %s", own)
	}
}

// A Checkpoint, a SandboxFork (status.checkpointID) or a Sandbox (status.zygo.warmCheckpointID)
// whose status was pointed at another's image: deleting it leaves that image alone.
func TestForgedCheckpointIDNotRemoved(t *testing.T) {
	ctx := context.Background()
	src := &agentsv1.Sandbox{ObjectMeta: objMeta("src"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	e := newEnv(t, src)
	e.reconcile(&SandboxReconciler{Client: e.c, Dialer: e.agents}, src)
	e.get(src)
	victim := &zygov1.Checkpoint{ObjectMeta: objMeta("victim"), Spec: zygov1.CheckpointSpec{SandboxRef: zygov1.LocalRef{Name: "src"}}}
	forger := &zygov1.Checkpoint{ObjectMeta: objMeta("forger"), Spec: zygov1.CheckpointSpec{SandboxRef: zygov1.LocalRef{Name: "src"}}}
	e.create(victim)
	e.create(forger)
	cr := &CheckpointReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(cr, victim)
	e.reconcile(cr, forger)
	e.get(victim)
	e.get(forger)
	vimg := victim.Status.CheckpointID
	before := forger.DeepCopy()
	forger.Status.CheckpointID = vimg
	if err := e.c.Status().Patch(ctx, forger, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, forger); err != nil {
		t.Fatal(err)
	}
	e.reconcile(cr, forger)
	if !e.agents["a"].images[vimg] {
		t.Errorf("deleting a Checkpoint whose status names another's image %s removed it", vimg)
	}

	f := &zygov1.SandboxFork{ObjectMeta: objMeta("f"), Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: "src"}, Count: 1, NodeName: "b"}}
	f.Finalizers = []string{Finalizer}
	e.create(f)
	fb := f.DeepCopy()
	f.Status.NodeName, f.Status.CheckpointID, f.Status.CopiedFrom = "a", vimg, "b/x"
	if err := e.c.Status().Patch(ctx, f, client.MergeFrom(fb)); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, f); err != nil {
		t.Fatal(err)
	}
	e.reconcile(&ForkReconciler{Client: e.c, Dialer: e.agents}, f)
	if !e.agents["a"].images[vimg] {
		t.Errorf("deleting a SandboxFork whose status names another's image %s removed it", vimg)
	}

	// A Sandbox whose status.zygo.warmCheckpointID (a warm source's image) was pointed at it.
	sr := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	thief := &agentsv1.Sandbox{ObjectMeta: objMeta("thief"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	e.create(thief)
	e.reconcile(sr, thief)
	e.get(thief)
	tb := thief.DeepCopy()
	thief.Status.Zygo.WarmCheckpointID = vimg
	if err := e.c.Status().Patch(ctx, thief, client.MergeFrom(tb)); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, thief); err != nil {
		t.Fatal(err)
	}
	e.reconcile(sr, thief)
	if !e.agents["a"].images[vimg] {
		t.Errorf("deleting a Sandbox whose status.zygo.warmCheckpointID names another's image %s removed it", vimg)
	}
}

// A tenant who may write its Sandbox's status and annotations (and owner references) points
// it at another namespace's fork copy: the copy is named for that namespace's SandboxFork
// (forkCopyName), which no SandboxFork of the tenant's namespace is, so nothing is minted for
// it and the forger's deletion leaves it. The old code trusted the annotations for a copy.
func TestForgedCopyNotActedOn(t *testing.T) {
	ctx := context.Background()
	src := &agentsv1.Sandbox{ObjectMeta: objMeta("src"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	f := &zygov1.SandboxFork{ObjectMeta: objMeta("f"), Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: "src"}, Count: 1}}
	e := newEnv(t, src, f)
	r := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(r, src)
	e.reconcile(&ForkReconciler{Client: e.c, Dialer: e.agents}, f)
	e.get(f)
	if len(f.Status.Children) != 1 || f.Status.Children[0].SandboxID == "" {
		t.Fatalf("fork status %+v", f.Status)
	}
	vid := f.Status.Children[0].SandboxID
	victim := &agentsv1.Sandbox{}
	victim.Namespace, victim.Name = "ns", f.Status.Children[0].Sandbox
	e.reconcile(r, victim)
	e.get(victim)
	if c := condition(t, victim.Status.Conditions, agentsv1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Fatalf("the fork's own copy: Ready %+v", c)
	}

	yes := true
	thief := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "evil", Name: "thief", UID: "uid-evil-thief",
		Annotations:     map[string]string{agentsv1.AnnotationNode: "a", agentsv1.AnnotationSandboxID: vid},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: zygov1.GroupVersion.String(), Kind: "SandboxFork", Name: "f", UID: f.UID, Controller: &yes}}},
		Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	e.create(thief)
	before := thief.DeepCopy()
	thief.Status.NodeName, thief.Status.Zygo.SandboxID = "a", vid
	if err := e.c.Status().Patch(ctx, thief, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	e.reconcile(r, thief)
	e.get(thief)
	if c := condition(t, thief.Status.Conditions, agentsv1.ConditionReady); c.Reason != agentsv1.ReasonSandboxNotOwned {
		t.Errorf("a status naming another namespace's copy: Ready %+v, want SandboxNotOwned", c)
	}
	var s corev1.Secret
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: "evil", Name: AccessSecretName("thief")}, &s); err == nil && string(s.Data[AccessKeySandboxID]) == vid {
		t.Errorf("the forger's access Secret names the other namespace's copy %s", vid)
	}
	if err := e.c.Delete(ctx, thief); err != nil {
		t.Fatal(err)
	}
	e.reconcile(r, thief)
	a := e.agents["a"]
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.sandboxes[vid]; !ok {
		t.Errorf("deleting the forger removed the other namespace's copy %s", vid)
	}
}
