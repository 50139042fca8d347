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
