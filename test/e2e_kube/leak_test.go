package e2ekube

// Leaks and squats a tenant could cause (the "reattack" round): a Checkpoint's image orphaned by
// a changed spec.tag, a same-node SandboxFork's image left on the node, a fork copy running
// with no Sandbox when its name was taken.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// testLeaks runs the parts in a namespace of their own, against one source Sandbox on node-a.
func (e *env) testLeaks(t *testing.T) {
	e.mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lk-tenant"}})
	src := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "lk-tenant", Name: "src"}, Spec: agentsv1.SandboxSpec{NodeName: "node-a"}}
	e.mustCreate(t, src)
	e.waitReady(t, src, 2*time.Minute)
	t.Run("CheckpointTagImmutable", e.testCheckpointTagImmutable)
	t.Run("SameNodeForkImageRemoved", e.testSameNodeForkImageRemoved)
	t.Run("ForkCopyNameSquat", e.testForkCopyNameSquat)
	_ = e.c.Delete(context.Background(), src)
}

// waitGone waits until o no longer exists.
func (e *env) waitGone(t *testing.T, o client.Object) {
	t.Helper()
	waitFor(t, 2*time.Minute, o.GetName()+" gone", func() (bool, string) {
		err := e.get(o)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// testCheckpointTagImmutable: the API server refuses a change of a Checkpoint's spec.tag (set
// or added), and deleting the Checkpoint removes its image from the node.
func (e *env) testCheckpointTagImmutable(t *testing.T) {
	bg := context.Background()
	ck := &zygov1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "lk-tenant", Name: "tagged"},
		Spec: zygov1.CheckpointSpec{SandboxRef: zygov1.LocalRef{Name: "src"}}}
	e.mustCreate(t, ck)
	waitFor(t, 2*time.Minute, "image taken", func() (bool, string) {
		_ = e.get(ck)
		return ck.Status.CheckpointID != "", condStr(ck.Status.Conditions, "Ready")
	})
	id := ck.Status.CheckpointID
	if ck.Status.Tag != "k8s-"+string(ck.UID) {
		t.Errorf("status.tag %q, want k8s-%s", ck.Status.Tag, ck.UID)
	}
	before := ck.DeepCopy()
	ck.Spec.Tag = "renamed"
	err := e.c.Patch(bg, ck, client.MergeFrom(before))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "tag is immutable") {
		t.Errorf("adding spec.tag: %v, want Invalid naming \"tag is immutable\"", err)
	}
	_ = e.get(ck)
	if err := e.c.Delete(bg, ck); err != nil {
		t.Fatal(err)
	}
	e.waitGone(t, ck)
	n := e.nodes["node-a"]
	if img, err := zygo.NewTCPClient(n.addr, n.token).GetCheckpoint(bg, id); !zygo.IsNotFound(err) {
		t.Errorf("Checkpoint deleted, its image %s is still on node-a (%+v, %v)", id, img, err)
	}
}

// testSameNodeForkImageRemoved: deleting a SandboxFork on the source's node removes the image
// the fork took (tag "fork") once its copies are gone.
func (e *env) testSameNodeForkImageRemoved(t *testing.T) {
	bg := context.Background()
	f := &zygov1.SandboxFork{ObjectMeta: metav1.ObjectMeta{Namespace: "lk-tenant", Name: "lf"},
		Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: "src"}, Count: 1}}
	e.mustCreate(t, f)
	waitFor(t, 2*time.Minute, "forked", func() (bool, string) {
		_ = e.get(f)
		return f.Status.CheckpointID != "", condStr(f.Status.Conditions, zygov1.ConditionComplete)
	})
	id := f.Status.CheckpointID
	n := e.nodes["node-a"]
	a := zygo.NewTCPClient(n.addr, n.token)
	if img, err := a.GetCheckpoint(bg, id); err != nil || img.Tag != "fork" {
		t.Fatalf("the fork's image %s: %+v, %v; want it on node-a tagged fork", id, img, err)
	}
	if err := e.c.Delete(bg, f); err != nil {
		t.Fatal(err)
	}
	e.waitGone(t, f)
	if img, err := a.GetCheckpoint(bg, id); !zygo.IsNotFound(err) {
		t.Errorf("SandboxFork deleted, its image %s is still on node-a (%+v, %v)", id, img, err)
	}
}

// testForkCopyNameSquat: a Sandbox named like a SandboxFork's copy (FORK-0), made before the
// fork, makes the fork remove that copy from the node and say so (Complete=False, NameTaken),
// not leave it running with no Sandbox recording it.
func (e *env) testForkCopyNameSquat(t *testing.T) {
	bg := context.Background()
	squat := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "lk-tenant", Name: "sq-0"}, Spec: agentsv1.SandboxSpec{NodeName: "no-such-node"}}
	e.mustCreate(t, squat)
	f := &zygov1.SandboxFork{ObjectMeta: metav1.ObjectMeta{Namespace: "lk-tenant", Name: "sq"},
		Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: "src"}, Count: 1}}
	e.mustCreate(t, f)
	waitFor(t, 2*time.Minute, "NameTaken", func() (bool, string) {
		_ = e.get(f)
		c := meta.FindStatusCondition(f.Status.Conditions, zygov1.ConditionComplete)
		return c != nil && c.Reason == zygov1.ReasonNameTaken, condStr(f.Status.Conditions, zygov1.ConditionComplete)
	})
	if c := meta.FindStatusCondition(f.Status.Conditions, zygov1.ConditionComplete); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "lk-tenant/sq-0") {
		t.Errorf("Complete = %+v; want False naming lk-tenant/sq-0", c)
	}
	n := e.nodes["node-a"]
	copyName := "k8s-" + string(f.UID) + "-0"
	if rec, err := zygo.NewTCPClient(n.addr, n.token).GetSandbox(bg, copyName); !zygo.IsNotFound(err) {
		t.Errorf("copy %s still on node-a (%s %s, %v) with no Sandbox recording it", copyName, rec.ID, rec.State, err)
	}
	for _, o := range []client.Object{f, squat} {
		_ = e.c.Delete(bg, o)
	}
	e.waitGone(t, f)
}
