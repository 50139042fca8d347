package e2ekube

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
	"github.com/zygo-run/zygo/internal/kube/controller"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// testForeignAnnotations: a Sandbox of namespace evil annotated with default/victim's sandbox
// id (adoption) or with its checkpoint (fork-from) is refused with InvalidSpec; nothing is
// copied and deleting it leaves the victim's sandbox running (KUBE-FINDINGS F5).
func (e *env) testForeignAnnotations(t *testing.T) {
	bg := context.Background()
	e.mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "evil"}})
	victim := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "victim"}, Spec: agentsv1.SandboxSpec{NodeName: "node-a"}}
	e.mustCreate(t, victim)
	waitFor(t, 2*time.Minute, "victim Ready", func() (bool, string) {
		if err := e.get(victim); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(victim.Status.Conditions, agentsv1.ConditionReady), condStr(victim.Status.Conditions, agentsv1.ConditionReady)
	})
	id := victim.Status.Zygo.SandboxID
	n := e.nodes["node-a"]
	a := zygo.NewTCPClient(n.addr, n.token)
	ck := &zygov1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "victim-ck"}, Spec: zygov1.CheckpointSpec{SandboxRef: zygov1.LocalRef{Name: "victim"}}}
	e.mustCreate(t, ck)
	waitFor(t, 2*time.Minute, "victim's checkpoint made", func() (bool, string) {
		_ = e.get(ck)
		return ck.Status.CheckpointID != "", condStr(ck.Status.Conditions, "Ready")
	})
	thieves := []*agentsv1.Sandbox{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "evil", Name: "adopter",
			Annotations: map[string]string{agentsv1.AnnotationNode: "node-a", agentsv1.AnnotationSandboxID: id}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "evil", Name: "forker",
			Annotations: map[string]string{controller.AnnotationForkFrom: "node-a/" + id + "/" + ck.Status.CheckpointID}}},
	}
	for _, th := range thieves {
		e.mustCreate(t, th)
		waitFor(t, 30*time.Second, th.Name+" refused", func() (bool, string) {
			_ = e.get(th)
			c := meta.FindStatusCondition(th.Status.Conditions, agentsv1.ConditionReady)
			return c != nil && c.Reason == agentsv1.ReasonInvalidSpec, condStr(th.Status.Conditions, agentsv1.ConditionReady)
		})
		if th.Status.Zygo.SandboxID != "" || th.Status.NodeName != "" {
			t.Errorf("%s recorded node %q sandbox %q, want nothing", th.Name, th.Status.NodeName, th.Status.Zygo.SandboxID)
		}
		if err := e.c.Delete(bg, th); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, th.Name+" gone", func() (bool, string) {
			err := e.get(th)
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		if _, err := a.GetSandbox(bg, id); err != nil {
			t.Fatalf("victim's sandbox %s after deleting evil/%s: %v", id, th.Name, err)
		}
	}
	sbs, err := a.ListSandboxes(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sbs {
		if s.ID != id && strings.Contains(s.ParentID, id) {
			t.Errorf("node-a holds a copy %s of the victim", s.ID)
		}
	}
	for _, o := range []client.Object{ck, victim} {
		if err := e.c.Delete(bg, o); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 90*time.Second, "victim and checkpoint gone", func() (bool, string) {
		e1, e2 := e.get(ck), e.get(victim)
		return apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2), fmt.Sprint(e1, e2)
	})
}

// testNodeDelete: deleting node-a's ZygoNode while its agent answers keeps it (Deleting) until
// the Sandbox on it is deleted, and that Sandbox's sandbox is removed from the agent
// (KUBE-FINDINGS F8). It runs last: node-a is gone afterwards.
func (e *env) testNodeDelete(t *testing.T) {
	bg := context.Background()
	sb := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "on-a"}, Spec: agentsv1.SandboxSpec{NodeName: "node-a"}}
	e.mustCreate(t, sb)
	waitFor(t, 2*time.Minute, "on-a Ready", func() (bool, string) {
		if err := e.get(sb); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(sb.Status.Conditions, agentsv1.ConditionReady), condStr(sb.Status.Conditions, agentsv1.ConditionReady)
	})
	id := sb.Status.Zygo.SandboxID
	zn := &zygov1.ZygoNode{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	if err := e.c.Delete(bg, zn); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "node-a Deleting", func() (bool, string) {
		if err := e.get(zn); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(zn.Status.Conditions, zygov1.ConditionReady)
		return c != nil && c.Reason == zygov1.ReasonDeleting && strings.Contains(c.Message, "Sandbox default/on-a"), condStr(zn.Status.Conditions, zygov1.ConditionReady)
	})
	if err := e.c.Delete(bg, sb); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "on-a and ZygoNode node-a gone", func() (bool, string) {
		e1, e2 := e.get(sb), e.get(zn)
		return apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2), fmt.Sprint(e1, e2)
	})
	n := e.nodes["node-a"]
	if _, err := zygo.NewTCPClient(n.addr, n.token).GetSandbox(bg, id); !zygo.IsNotFound(err) {
		t.Fatalf("sandbox %s of on-a still on node-a's agent after both objects went: %v", id, err)
	}
}
