package e2ekube

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// testCrossNodeFork: a Sandbox on node-a, a Checkpoint of it there, and a SandboxFork of that
// Checkpoint to node-b. The controller streams the image from one agent to the other
// (status.copiedBytes), and the copies are Ready Sandboxes on node-b with the source's files
// and generations of their own. Deleting the fork removes the copies and the copied image
// from node-b; nothing of it stays.
func (e *env) testCrossNodeFork(t *testing.T) {
	ctx := context.Background()
	mem := resource.MustParse("256Mi")
	sb := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "xsrc"},
		Spec: agentsv1.SandboxSpec{NodeName: "node-a", Zygo: agentsv1.ZygoSandboxSpec{Limits: agentsv1.Limits{Memory: &mem}}}}
	e.mustCreate(t, sb)
	waitFor(t, 2*time.Minute, "Sandbox xsrc Ready", func() (bool, string) {
		if err := e.get(sb); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(sb.Status.Conditions, agentsv1.ConditionReady), condStr(sb.Status.Conditions, agentsv1.ConditionReady)
	})
	a, b := e.nodes["node-a"], e.nodes["node-b"]
	agentA, agentB := zygo.NewTCPClient(a.addr, a.token), zygo.NewTCPClient(b.addr, b.token)
	if st, err := agentA.Exec(ctx, sb.Status.Zygo.SandboxID, execBody("sh", "-c", "echo from node-a > /tmp/origin"), io.Discard, io.Discard); err != nil || st.Code != 0 {
		t.Fatalf("writing a file in the source: %v %+v", err, st)
	}
	cp := &zygov1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "xcp"},
		Spec: zygov1.CheckpointSpec{SandboxRef: zygov1.LocalRef{Name: sb.Name}}}
	e.mustCreate(t, cp)
	waitFor(t, 2*time.Minute, "Checkpoint xcp Ready", func() (bool, string) {
		if err := e.get(cp); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(cp.Status.Conditions, zygov1.ConditionReady), condStr(cp.Status.Conditions, zygov1.ConditionReady)
	})
	f := &zygov1.SandboxFork{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "xf"},
		Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: sb.Name}, Count: 2, CheckpointRef: &zygov1.LocalRef{Name: "xcp"}, NodeName: "node-b"}}
	e.mustCreate(t, f)
	waitFor(t, 5*time.Minute, "SandboxFork xf Complete", func() (bool, string) {
		if err := e.get(f); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(f.Status.Conditions, zygov1.ConditionComplete), condStr(f.Status.Conditions, zygov1.ConditionComplete)
	})
	t.Logf("cross-node fork: %s", condStr(f.Status.Conditions, zygov1.ConditionComplete))
	if f.Status.NodeName != "node-b" || f.Status.Succeeded != 2 || f.Status.CopiedBytes <= 0 ||
		f.Status.CopiedFrom != "node-a/"+cp.Status.CheckpointID || f.Status.CheckpointID == cp.Status.CheckpointID {
		t.Fatalf("fork status %+v: want 2 copies on node-b of a copy of %s, copiedBytes > 0", f.Status, cp.Status.CheckpointID)
	}
	if _, err := agentB.GetCheckpoint(ctx, f.Status.CheckpointID); err != nil {
		t.Fatalf("node-b has no copied image %s: %v", f.Status.CheckpointID, err)
	}
	gens := map[string]bool{sb.Status.Zygo.Generation: true}
	var copies []client.Object
	for _, ch := range f.Status.Children {
		c := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: ch.Sandbox}}
		waitFor(t, time.Minute, "copy "+ch.Sandbox+" Ready", func() (bool, string) {
			if err := e.get(c); err != nil {
				return false, err.Error()
			}
			return meta.IsStatusConditionTrue(c.Status.Conditions, agentsv1.ConditionReady), condStr(c.Status.Conditions, agentsv1.ConditionReady)
		})
		if c.Status.NodeName != "node-b" || c.Status.Zygo.AgentAddress != b.addr || gens[c.Status.Zygo.Generation] {
			t.Fatalf("copy %s: %+v (generations so far %v)", c.Name, c.Status, gens)
		}
		gens[c.Status.Zygo.Generation] = true
		if rec, err := agentB.GetSandbox(ctx, fmt.Sprintf("k8s-%s-%d", f.UID, ch.Index)); err != nil || rec.ID != ch.SandboxID {
			t.Fatalf("copy %d by its name k8s-%s-%d on node-b: %+v, %v; want %s", ch.Index, f.UID, ch.Index, rec, err, ch.SandboxID)
		}
		var out bytes.Buffer
		if st, err := agentB.Exec(ctx, c.Status.Zygo.SandboxID, execBody("cat", "/tmp/origin"), &out, io.Discard); err != nil || st.Code != 0 ||
			strings.TrimSpace(out.String()) != "from node-a" {
			t.Fatalf("copy %s on node-b: cat /tmp/origin = %q, %v, %+v", c.Name, out.String(), err, st)
		}
		copies = append(copies, c)
	}
	copied := f.Status.CheckpointID
	for _, o := range []client.Object{f, cp, sb} {
		if err := e.c.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 2*time.Minute, "the fork, its copies, the checkpoint and the source gone", func() (bool, string) {
		for _, o := range append([]client.Object{f, cp, sb}, copies...) {
			if err := e.get(o); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("%s: %v", o.GetName(), err)
			}
		}
		return true, ""
	})
	if _, err := agentB.GetCheckpoint(ctx, copied); !zygo.IsNotFound(err) {
		t.Fatalf("node-b still has the copied image %s (%v)", copied, err)
	}
	if n := e.sandboxesOnNodes(t); n != 0 {
		t.Fatalf("%d sandboxes left on the nodes", n)
	}
}
