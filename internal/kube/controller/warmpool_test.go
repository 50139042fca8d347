package controller

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	extv1 "github.com/zygo-run/zygo/internal/kube/api/extensions/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
)

var isController = true

// evilMeta is the metadata of an object of the tenant namespace "evil".
func evilMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: "evil", Name: name, UID: types.UID("uid-evil-" + name)}
}

// victimImage makes Sandbox ns/victim on node and an image of it; it returns the sandbox's
// and the image's ids.
func victimImage(t *testing.T, e *env, r *SandboxReconciler, node string) (string, string) {
	t.Helper()
	victim := &agentsv1.Sandbox{ObjectMeta: objMeta("victim"), Spec: agentsv1.SandboxSpec{NodeName: node}}
	e.create(victim)
	e.reconcile(r, victim)
	e.reconcile(r, victim)
	e.get(victim)
	if victim.Status.Zygo.SandboxID == "" {
		t.Fatalf("victim not made: %+v", victim.Status)
	}
	ck, err := e.agents[node].Checkpoint(context.Background(), victim.Status.Zygo.SandboxID, "victim-tag")
	if err != nil {
		t.Fatal(err)
	}
	return victim.Status.Zygo.SandboxID, ck.ID
}

// TestWarmPoolCheckpointAnnotationIgnored: a tenant's warm pool source annotated with another
// namespace's image (zygo.run/warm-checkpoint, the old place of the pool's record) gets its
// own image, recorded in its status; its claims fork that one; deleting the source leaves the
// victim's image on the node.
func TestWarmPoolCheckpointAnnotationIgnored(t *testing.T) {
	e := newEnv(t)
	sr := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	pr := &WarmPoolReconciler{Client: e.c, Dialer: e.agents}
	cr := &ClaimReconciler{Client: e.c}
	_, victimCk := victimImage(t, e, sr, "a")
	node := e.agents["a"]

	tpl := &extv1.SandboxTemplate{ObjectMeta: evilMeta("tpl")}
	pool := &extv1.SandboxWarmPool{ObjectMeta: evilMeta("pool"), Spec: extv1.SandboxWarmPoolSpec{Replicas: 1, TemplateRef: extv1.SandboxTemplateRef{Name: "tpl"}}}
	e.create(tpl)
	e.create(pool)
	// The tenant makes the pool's source itself, owned by the pool, naming the victim's image.
	src := &agentsv1.Sandbox{ObjectMeta: evilMeta(sourceName("pool", 0)), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	src.Labels = map[string]string{extv1.LabelWarmPool: "pool"}
	src.Annotations = map[string]string{"zygo.run/warm-checkpoint": victimCk}
	src.OwnerReferences = []metav1.OwnerReference{{APIVersion: extv1.GroupVersion.String(), Kind: "SandboxWarmPool", Name: "pool",
		UID: pool.UID, Controller: &isController}}
	e.create(src)
	e.reconcile(sr, src)
	e.reconcile(pr, pool)
	e.get(src)
	own := src.Status.Zygo.WarmCheckpointID
	if own == "" || own == victimCk || !strings.HasPrefix(own, "cp-warm-") {
		t.Fatalf("source's warm checkpoint %q, want its own image (victim's is %s)", own, victimCk)
	}
	e.get(pool)
	if pool.Status.ReadyReplicas != 1 {
		t.Fatalf("pool status %+v", pool.Status)
	}

	cl := &extv1.SandboxClaim{ObjectMeta: evilMeta("claim"), Spec: extv1.SandboxClaimSpec{TemplateRef: extv1.SandboxTemplateRef{Name: "tpl"}}}
	e.create(cl)
	e.reconcile(cr, cl)
	sb := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "evil", Name: "claim"}}
	e.get(sb)
	if from := sb.Annotations[AnnotationForkFrom]; !strings.HasSuffix(from, "/"+own) {
		t.Fatalf("claim's fork-from %q, want the source's own image %s", from, own)
	}
	e.reconcile(sr, sb)
	e.get(sb)
	if !meta.IsStatusConditionTrue(sb.Status.Conditions, agentsv1.ConditionReady) {
		t.Fatalf("claim's Sandbox: %s", conditionMessage(sb.Status.Conditions, agentsv1.ConditionReady))
	}
	for _, from := range node.forkFrom {
		if from == victimCk {
			t.Fatalf("a fork from the victim's image %s was made", victimCk)
		}
	}

	// Deleting the tenant's source removes its own image at most, never the victim's.
	for _, o := range []client.Object{sb, src} {
		if err := e.c.Delete(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		e.reconcile(sr, o)
	}
	if !node.images[victimCk] {
		t.Fatal("deleting the tenant's warm source removed the victim's image")
	}
}

// TestWarmPoolUncontrolledSourceUnused: a Sandbox labelled as a pool's source that the pool
// does not control is never forked from, and the pool says its name is taken.
func TestWarmPoolUncontrolledSourceUnused(t *testing.T) {
	e := newEnv(t)
	sr := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	pr := &WarmPoolReconciler{Client: e.c, Dialer: e.agents}
	tpl := &extv1.SandboxTemplate{ObjectMeta: evilMeta("tpl")}
	pool := &extv1.SandboxWarmPool{ObjectMeta: evilMeta("pool"), Spec: extv1.SandboxWarmPoolSpec{Replicas: 1, TemplateRef: extv1.SandboxTemplateRef{Name: "tpl"}}}
	fake := &agentsv1.Sandbox{ObjectMeta: evilMeta(sourceName("pool", 0)), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	fake.Labels = map[string]string{extv1.LabelWarmPool: "pool"}
	for _, o := range []client.Object{tpl, pool, fake} {
		e.create(o)
	}
	e.reconcile(sr, fake)
	e.reconcile(pr, pool)
	e.get(pool)
	if c := condition(t, pool.Status.Conditions, agentsv1.ConditionReady); c.Reason != agentsv1.ReasonCreateFailed || !strings.Contains(c.Message, "does not control") {
		t.Fatalf("pool Ready %+v, want CreateFailed naming the taken name", c)
	}
	e.get(fake)
	if fake.Status.Zygo.WarmCheckpointID != "" || len(e.agents["a"].ckpts) != 0 {
		t.Fatalf("the uncontrolled Sandbox was checkpointed: %+v", fake.Status.Zygo)
	}
}

// TestCheckpointTagOfAnotherSandbox: a Checkpoint whose spec.tag is the tag of another
// namespace's image gets an image of its own Sandbox, and its deletion leaves the other.
func TestCheckpointTagOfAnotherSandbox(t *testing.T) {
	e := newEnv(t)
	sr := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	_, victimCk := victimImage(t, e, sr, "a")
	mine := &agentsv1.Sandbox{ObjectMeta: evilMeta("mine"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	e.create(mine)
	e.reconcile(sr, mine)
	ck := &zygov1.Checkpoint{ObjectMeta: evilMeta("ck"), Spec: zygov1.CheckpointSpec{SandboxRef: zygov1.LocalRef{Name: "mine"}, Tag: "victim-tag"}}
	e.create(ck)
	cpr := &CheckpointReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(cpr, ck)
	e.get(ck)
	if ck.Status.CheckpointID == "" || ck.Status.CheckpointID == victimCk {
		t.Fatalf("Checkpoint status %+v: want an image of its own (the victim's is %s)", ck.Status, victimCk)
	}
	if err := e.c.Delete(context.Background(), ck); err != nil {
		t.Fatal(err)
	}
	e.reconcile(cpr, ck)
	if node := e.agents["a"]; !node.images[victimCk] || node.images[ck.Status.CheckpointID] {
		t.Fatalf("after deleting the tenant's Checkpoint: victim's image kept %v, own removed %v", node.images[victimCk], !node.images[ck.Status.CheckpointID])
	}
}

// TestForkFromChangedAfterPlacement: a fork-from annotation that was trusted when the Sandbox
// was placed and then changed to another sandbox of the node is checked again before the
// fork: the Sandbox is refused and nothing is forked.
func TestForkFromChangedAfterPlacement(t *testing.T) {
	e := newEnv(t)
	sr := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	pr := &WarmPoolReconciler{Client: e.c, Dialer: e.agents}
	tpl := &extv1.SandboxTemplate{ObjectMeta: evilMeta("tpl")}
	pool := &extv1.SandboxWarmPool{ObjectMeta: evilMeta("pool"), Spec: extv1.SandboxWarmPoolSpec{Replicas: 1, TemplateRef: extv1.SandboxTemplateRef{Name: "tpl"}}}
	e.create(tpl)
	e.create(pool)
	e.reconcile(pr, pool)
	src := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "evil", Name: sourceName("pool", 0)}}
	e.get(src)
	e.reconcile(sr, src)
	e.reconcile(pr, pool)
	e.get(src)
	if src.Status.Zygo.WarmCheckpointID == "" {
		t.Fatalf("source not warm: %+v", src.Status)
	}
	n := src.Status.NodeName
	victimID, victimCk := victimImage(t, e, sr, n) // on the source's node: a fork there could reach it
	thief := &agentsv1.Sandbox{ObjectMeta: evilMeta("thief")}
	thief.Annotations = map[string]string{AnnotationForkFrom: n + "/" + src.Status.Zygo.SandboxID + "/" + src.Status.Zygo.WarmCheckpointID}
	e.create(thief)
	// One pass: trusted, placed on the source's node, not made yet.
	if _, err := sr.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(thief)}); err != nil {
		t.Fatal(err)
	}
	e.get(thief)
	if thief.Status.NodeName != n || thief.Status.Zygo.SandboxID != "" {
		t.Fatalf("after one pass: %+v, want placed on %s and not made", thief.Status, n)
	}
	thief.Annotations[AnnotationForkFrom] = n + "/" + victimID + "/" + victimCk
	if err := e.c.Update(context.Background(), thief); err != nil {
		t.Fatal(err)
	}
	forks := e.agents[n].forks
	e.reconcile(sr, thief)
	e.get(thief)
	if c := condition(t, thief.Status.Conditions, agentsv1.ConditionReady); c.Reason != agentsv1.ReasonInvalidSpec || thief.Status.Zygo.SandboxID != "" {
		t.Fatalf("thief: Ready %+v, status %+v: want InvalidSpec and nothing made", c, thief.Status.Zygo)
	}
	if e.agents[n].forks != forks {
		t.Fatal("a fork was made from the changed annotation")
	}
}
