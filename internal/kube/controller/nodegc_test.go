package controller

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// The node's garbage collection removes what the controller made for an object that no
// longer exists, by name: a k8s-UID sandbox whose Sandbox is gone, and a fork copy
// (forkCopyName) whose SandboxFork is gone, recorded or not. It keeps a live SandboxFork's
// copies before they are recorded (the controller may be writing the status), and copies
// named by the agent before the controller named them, while a status records them.
func TestNodeCollectKeepsCopies(t *testing.T) {
	ctx := context.Background()
	src := &agentsv1.Sandbox{ObjectMeta: objMeta("src"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	f := &zygov1.SandboxFork{ObjectMeta: objMeta("f"), Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: "src"}, Count: 1}}
	old := &agentsv1.Sandbox{ObjectMeta: objMeta("old")}
	e := newEnv(t, src, f, old)
	e.reconcile(&SandboxReconciler{Client: e.c, Dialer: e.agents}, src)
	e.get(src)
	a := e.agents["a"]
	fork := func(name string) string {
		t.Helper()
		ans, err := a.ForkWith(ctx, src.Status.Zygo.SandboxID, wire.ForkBody{N: 1, Names: []string{name}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ans.Children[0].Sandbox.ID
	}
	liveCopy := fork(forkCopyName(f.UID, 0))              // a live fork's copy, not recorded yet
	orphan := fork(forkCopyName("uid-of-a-gone-fork", 0)) // the controller died; the fork was deleted
	agentNamed := fork("k8s-uid-src-0123abcd")            // named by the agent, recorded in old's status
	old.Status.NodeName, old.Status.Zygo.SandboxID = "a", agentNamed
	if err := e.c.Status().Update(ctx, old); err != nil {
		t.Fatal(err)
	}
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
	for what, id := range map[string]string{"a live fork's unrecorded copy": liveCopy, "a recorded agent-named copy": agentNamed,
		"src's own sandbox": src.Status.Zygo.SandboxID} {
		if _, ok := a.sandboxes[id]; !ok {
			t.Errorf("the collection removed %s (%s)", what, id)
		}
	}
	for what, id := range map[string]string{"a gone fork's copy": orphan, "a gone Sandbox's sandbox": leftover.ID} {
		if _, ok := a.sandboxes[id]; ok {
			t.Errorf("the collection kept %s (%s)", what, id)
		}
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
