package controller

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
)

// reconcileOnce runs one pass of r on obj and returns how long it took.
func reconcileOnce(t *testing.T, r *SandboxReconciler, obj client.Object) (ctrl.Result, time.Duration) {
	t.Helper()
	begin := time.Now()
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
	if err != nil {
		t.Fatalf("reconciling %s: %v", obj.GetName(), err)
	}
	return res, time.Since(begin)
}

// TestHungNodeDoesNotHoldWorkers: a create on an agent that does not answer lets the
// reconcile go after createInlineWait (Creating, requeued) instead of holding the worker for
// createTimeout; a Sandbox on another node is made meanwhile; once the agent answers, the
// next pass records the sandbox without a second create; a Sandbox deleted while its create
// is under way waits for it, then removes what it made.
func TestHungNodeDoesNotHoldWorkers(t *testing.T) {
	slow := &agentsv1.Sandbox{ObjectMeta: objMeta("slow"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	gone := &agentsv1.Sandbox{ObjectMeta: objMeta("gone"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	fast := &agentsv1.Sandbox{ObjectMeta: objMeta("fast"), Spec: agentsv1.SandboxSpec{NodeName: "b"}}
	e := newEnv(t, slow, gone, fast)
	r := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	a := e.agents["a"]
	hang := make(chan struct{})
	a.hang = hang
	for _, sb := range []*agentsv1.Sandbox{slow, gone} {
		reconcileOnce(t, r, sb) // placed (the node recorded first)
		res, took := reconcileOnce(t, r, sb)
		if took > createInlineWait+5*time.Second || res.RequeueAfter == 0 {
			t.Fatalf("%s: the pass took %v (result %+v): want it to let go after about %v and requeue", sb.Name, took, res, createInlineWait)
		}
		e.get(sb)
		if c := condition(t, sb.Status.Conditions, agentsv1.ConditionReady); c.Reason != agentsv1.ReasonCreating || sb.Status.Zygo.SandboxID != "" {
			t.Fatalf("%s while its agent hangs: %+v, %+v", sb.Name, c, sb.Status.Zygo)
		}
	}
	e.reconcile(r, fast)
	e.get(fast)
	if !meta.IsStatusConditionTrue(fast.Status.Conditions, agentsv1.ConditionReady) {
		t.Fatalf("the Sandbox on node b was not made while node a hangs: %s", conditionMessage(fast.Status.Conditions, agentsv1.ConditionReady))
	}

	// gone is deleted while its create hangs: its finalizer waits for the create.
	if err := e.c.Delete(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	if res, _ := reconcileOnce(t, r, gone); res.RequeueAfter == 0 {
		t.Fatalf("deleting while the create is under way: %+v, want a requeue", res)
	}
	e.get(gone) // still there: the finalizer waits

	close(hang)
	waitOps(t, r, slow, gone)
	e.reconcile(r, slow)
	e.get(slow)
	if !meta.IsStatusConditionTrue(slow.Status.Conditions, agentsv1.ConditionReady) || slow.Status.Zygo.SandboxID == "" {
		t.Fatalf("slow after its agent answered: %s, %+v", conditionMessage(slow.Status.Conditions, agentsv1.ConditionReady), slow.Status.Zygo)
	}
	reconcileOnce(t, r, gone)
	var left agentsv1.Sandbox
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(gone), &left); err == nil {
		t.Fatalf("gone still exists: %+v", left.ObjectMeta)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.creates) != 2 || len(a.sandboxes) != 1 {
		t.Fatalf("node a: %d creates, %d sandboxes; want 2 creates and only slow's sandbox", len(a.creates), len(a.sandboxes))
	}
}

// waitOps waits until the ops of sbs have ended.
func waitOps(t *testing.T, r *SandboxReconciler, sbs ...*agentsv1.Sandbox) {
	t.Helper()
	for _, sb := range sbs {
		if op := r.ops.get(sb.UID); op != nil {
			select {
			case <-op.done:
			case <-time.After(10 * time.Second):
				t.Fatalf("the create of %s did not end", sb.Name)
			}
		}
	}
}
