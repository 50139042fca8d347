package controller

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
)

// The node's garbage collection removes a k8s-UID sandbox whose Sandbox is gone, and never a
// copy of a live one (a fork's copy is named by the agent after its source, k8s-UID-XXXXXXXX).
func TestNodeCollectKeepsCopies(t *testing.T) {
	ctx := context.Background()
	src := &agentsv1.Sandbox{ObjectMeta: objMeta("src"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	e := newEnv(t, src)
	e.reconcile(&SandboxReconciler{Client: e.c, Dialer: e.agents}, src)
	e.get(src)
	a := e.agents["a"]
	ans, err := a.Fork(ctx, src.Status.Zygo.SandboxID, 1, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	kid := ans.Children[0].Sandbox.ID
	a.mu.Lock()
	rec := a.sandboxes[kid]
	rec.Name = "k8s-uid-src-0123abcd" // as the daemon names it: childName(parent, id)
	a.sandboxes[kid] = rec
	a.mu.Unlock()
	leftover, err := a.CreateSandbox(ctx, wireCreate("k8s-uid-gone"))
	if err != nil {
		t.Fatal(err)
	}
	var n zygov1.ZygoNode
	if err := e.c.Get(ctx, client.ObjectKey{Name: "a"}, &n); err != nil {
		t.Fatal(err)
	}
	if err := (&NodeReconciler{Client: e.c, Dialer: e.agents}).collect(ctx, &n); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.sandboxes[kid]; !ok {
		t.Errorf("the collection removed a fork's copy %s of live Sandbox src", kid)
	}
	if _, ok := a.sandboxes[leftover.ID]; ok {
		t.Errorf("the collection kept leftover %s", leftover.ID)
	}
	if _, ok := a.sandboxes[src.Status.Zygo.SandboxID]; !ok {
		t.Errorf("the collection removed src's own sandbox")
	}
}

// A SandboxFork whose earlier try made copies and recorded nothing (the controller died
// before its status write) finds them by their names on its retry and removes them, then
// forks again under the same names.
func TestForkRetryRemovesUnrecordedCopies(t *testing.T) {
	ctx := context.Background()
	src := &agentsv1.Sandbox{ObjectMeta: objMeta("src"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	f := &zygov1.SandboxFork{ObjectMeta: objMeta("f"), Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: "src"}, Count: 2}}
	e := newEnv(t, src, f)
	e.reconcile(&SandboxReconciler{Client: e.c, Dialer: e.agents}, src)
	e.get(src)
	a := e.agents["a"]
	lost, err := a.ForkWith(ctx, src.Status.Zygo.SandboxID, wire.ForkBody{N: 2, Names: forkCopyNames(f)}, nil) // the lost try
	if err != nil {
		t.Fatal(err)
	}
	e.reconcile(&ForkReconciler{Client: e.c, Dialer: e.agents}, f)
	e.get(f)
	if f.Status.Succeeded != 2 || len(f.Status.Children) != 2 {
		t.Fatalf("retried fork: status %+v", f.Status)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ch := range lost.Children {
		if _, ok := a.sandboxes[ch.Sandbox.ID]; ok {
			t.Errorf("the lost try's copy %s (%s) is still on the node", ch.Sandbox.ID, ch.Sandbox.Name)
		}
	}
	for _, ch := range f.Status.Children {
		if rec := a.sandboxes[ch.SandboxID]; rec.Name != forkCopyName(f.UID, int(ch.Index)) {
			t.Errorf("copy %d: %+v, want it named %s", ch.Index, rec, forkCopyName(f.UID, int(ch.Index)))
		}
	}
}
