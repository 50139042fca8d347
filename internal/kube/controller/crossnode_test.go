package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// fakeImage is the bytes a fakeAgent exports for checkpoint id.
func fakeImage(id string) []byte { return bytes.Repeat([]byte("image of "+id+"\n"), 100) }

func (f *fakeAgent) ExportCheckpoint(ctx context.Context, id string) (*zygo.CheckpointImage, error) {
	f.mu.Lock()
	hang := f.hangExport
	f.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return nil, &zygo.Unreachable{Err: ctx.Err()}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, f.unreachable()
	}
	if f.refuseExport != nil {
		return nil, f.refuseExport
	}
	if !f.images[id] {
		return nil, notFound("checkpoint " + id)
	}
	b := fakeImage(id)
	sum := sha256.Sum256(b)
	return &zygo.CheckpointImage{Checkpoint: id, Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:]), Body: io.NopCloser(bytes.NewReader(b))}, nil
}

// ImportCheckpoint checks the stream's size and SHA-256, as the daemon does.
func (f *fakeAgent) ImportCheckpoint(_ context.Context, r io.Reader, size int64, sha, tag string) (wire.Checkpoint, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return wire.Checkpoint{}, err
	}
	sum := sha256.Sum256(b)
	if int64(len(b)) != size || hex.EncodeToString(sum[:]) != sha {
		return wire.Checkpoint{}, &zygo.Error{Status: http.StatusBadRequest, ErrorBody: wire.ErrorBody{Code: wire.CodeBadRequest, Message: "sha256: mismatch"}}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return wire.Checkpoint{}, f.unreachable()
	}
	f.next++
	id := fmt.Sprintf("cp-imp%s%d", f.name, f.next)
	f.images[id] = true
	cp := wire.Checkpoint{ID: id, Tag: tag, SizeBytes: size}
	f.ckpts = append(f.ckpts, cp)
	return cp, nil
}

func (f *fakeAgent) Restore(_ context.Context, checkpoint string, body wire.RestoreBody) (wire.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return wire.Sandbox{}, f.unreachable()
	}
	if !f.images[checkpoint] {
		return wire.Sandbox{}, notFound("checkpoint " + checkpoint)
	}
	if _, taken := f.find(body.Name); taken && body.Name != "" {
		return wire.Sandbox{}, &zygo.Error{Status: 409, ErrorBody: wire.ErrorBody{Code: wire.CodeExists, Message: fmt.Sprintf("name: a sandbox named %q already exists", body.Name)}}
	}
	f.next++
	rec := wire.Sandbox{ID: fmt.Sprintf("sb-%s%d", f.name, f.next), Name: body.Name, State: "running", CheckpointID: checkpoint,
		ParentID: "sb-source-of-" + checkpoint, Generation: fmt.Sprintf("gen%d", f.next)}
	f.sandboxes[rec.ID] = rec
	return rec, nil
}

// crossNodeEnv is a Ready source Sandbox on node a and a SandboxFork of it to node b.
func crossNodeEnv(t *testing.T) (*env, *zygov1.SandboxFork) {
	t.Helper()
	e := newEnv(t)
	src := &agentsv1.Sandbox{ObjectMeta: objMeta("src"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	e.create(src)
	e.reconcile(&SandboxReconciler{Client: e.c, Dialer: e.agents}, src)
	f := &zygov1.SandboxFork{ObjectMeta: objMeta("f"), Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: "src"}, Count: 2, NodeName: "b"}}
	e.create(f)
	return e, f
}

func TestForkCrossNodeCopiesTheImage(t *testing.T) {
	e, f := crossNodeEnv(t)
	r := &ForkReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(r, f)
	e.get(f)
	c := condition(t, f.Status.Conditions, zygov1.ConditionComplete)
	if c.Status != metav1.ConditionTrue || c.Reason != zygov1.ReasonForked {
		t.Fatalf("Complete = %+v", c)
	}
	taken := "cp-k8s-fork-uid-f" // the fake names a checkpoint cp-TAG
	if f.Status.NodeName != "b" || f.Status.Succeeded != 2 || f.Status.CopiedFrom != "a/"+taken ||
		f.Status.CopiedBytes != int64(len(fakeImage(taken))) || !strings.HasPrefix(f.Status.CheckpointID, "cp-impb") {
		t.Fatalf("status %+v", f.Status)
	}
	a, b := e.agents["a"], e.agents["b"]
	if a.forks+b.forks != 0 || a.images[taken] || !b.images[f.Status.CheckpointID] {
		t.Fatalf("forks a=%d b=%d; images a=%v b=%v: want no fork call, the image taken for the copy removed from a, the copy on b",
			a.forks, b.forks, a.images, b.images)
	}
	gens := map[string]bool{}
	for _, ch := range f.Status.Children {
		sb, ok := b.sandboxes[ch.SandboxID]
		if !ok || sb.CheckpointID != f.Status.CheckpointID || gens[ch.Generation] {
			t.Fatalf("copy %+v on b: %+v", ch, sb)
		}
		gens[ch.Generation] = true
		var obj agentsv1.Sandbox
		obj.Namespace, obj.Name = "ns", ch.Sandbox
		e.get(&obj)
		if obj.Spec.NodeName != "b" || obj.Annotations[agentsv1.AnnotationNode] != "b" {
			t.Fatalf("copy's Sandbox %s: node %q, annotations %v", obj.Name, obj.Spec.NodeName, obj.Annotations)
		}
	}

	// Deleting the SandboxFork: the copied image stays while its copies exist, then goes.
	if err := e.c.Delete(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	// First the copies' Sandboxes are deleted (the fork waits for them: their finalizers check
	// ownership against its status), then the image waits for the copies on the node.
	res, err := r.Reconcile(context.Background(), reqOf(f))
	if err != nil || res.RequeueAfter != time.Second {
		t.Fatalf("deleting: %+v, %v; want a wait for the copies' Sandboxes", res, err)
	}
	res, err = r.Reconcile(context.Background(), reqOf(f))
	if err != nil || res.RequeueAfter != removeRetry || !b.images[f.Status.CheckpointID] {
		t.Fatalf("deleting with copies left: %+v, %v; image on b %v", res, err, b.images)
	}
	for _, ch := range f.Status.Children {
		if err := b.RemoveSandbox(context.Background(), ch.SandboxID); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := r.Reconcile(context.Background(), reqOf(f)); err != nil || res.RequeueAfter != 0 || b.images[f.Status.CheckpointID] {
		t.Fatalf("deleting once the copies are gone: %+v, %v; images on b %v", res, err, b.images)
	}
}

func TestForkCrossNodeCopyRefused(t *testing.T) {
	e, f := crossNodeEnv(t)
	a, b := e.agents["a"], e.agents["b"]
	a.refuseExport = &zygo.Error{Status: http.StatusConflict, ErrorBody: wire.ErrorBody{Code: wire.CodeFailedPrecondition,
		Message: "checkpoint cp-x was taken of a sandbox that holds secrets"}}
	res := e.reconcile(&ForkReconciler{Client: e.c, Dialer: e.agents}, f)
	e.get(f)
	c := condition(t, f.Status.Conditions, zygov1.ConditionComplete)
	if c.Status != metav1.ConditionFalse || c.Reason != zygov1.ReasonCopyFailed || !strings.Contains(c.Message, "secrets") || res.RequeueAfter != 0 {
		t.Fatalf("Complete = %+v, requeue %v; want CopyFailed naming the cause, not retried", c, res.RequeueAfter)
	}
	if len(b.sandboxes) != 0 || len(b.images) != 0 || len(a.images) != 0 || f.Status.CheckpointID != "" {
		t.Fatalf("a refused copy left: sandboxes on b %v, images on b %v, on a %v; status %+v", b.sandboxes, b.images, a.images, f.Status)
	}
}

func TestForkCrossNodeTargetNotReady(t *testing.T) {
	e, f := crossNodeEnv(t)
	f.Spec.NodeName = "c" // no such ZygoNode
	if err := e.c.Update(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	e.reconcile(&ForkReconciler{Client: e.c, Dialer: e.agents}, f)
	e.get(f)
	if c := condition(t, f.Status.Conditions, zygov1.ConditionComplete); c.Reason != agentsv1.ReasonNoReadyNode || !strings.Contains(c.Message, "spec.nodeName") {
		t.Fatalf("Complete = %+v", c)
	}
	if len(e.agents["a"].images) != 0 {
		t.Fatalf("an image was taken for a copy to nowhere: %v", e.agents["a"].images)
	}
}

func reqOf(obj client.Object) ctrl.Request {
	return ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)}
}

// TestSlowCopyDoesNotHoldForkWorkers: a cross-node fork whose copy does not end lets the
// reconcile go after createInlineWait (Complete=False Copying, requeued) instead of holding
// the worker for the whole copy (the old code ran it inside the reconcile: this pass took
// until the copy ended); another SandboxFork is forked meanwhile by the same reconciler; once
// the copy ends, the next pass records it. A SandboxFork deleted while its copy runs cancels
// it and leaves nothing on either node.
func TestSlowCopyDoesNotHoldForkWorkers(t *testing.T) {
	e, slow := crossNodeEnv(t)
	gone := &zygov1.SandboxFork{ObjectMeta: objMeta("gone"), Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: "src"}, Count: 1, NodeName: "b"}}
	quick := &zygov1.SandboxFork{ObjectMeta: objMeta("quick"), Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: "src"}, Count: 1}}
	e.create(gone)
	e.create(quick)
	a, b := e.agents["a"], e.agents["b"]
	hang := make(chan struct{})
	a.mu.Lock()
	a.hangExport = hang
	a.mu.Unlock()
	r := &ForkReconciler{Client: e.c, Dialer: e.agents}
	for _, f := range []*zygov1.SandboxFork{slow, gone} {
		begin := time.Now()
		res, err := r.Reconcile(context.Background(), reqOf(f))
		if took := time.Since(begin); err != nil || took > createInlineWait+5*time.Second || res.RequeueAfter == 0 {
			t.Fatalf("%s: the pass took %v (%+v, %v): want it to let go after about %v and requeue", f.Name, took, res, err, createInlineWait)
		}
		e.get(f)
		if c := condition(t, f.Status.Conditions, zygov1.ConditionComplete); c.Reason != zygov1.ReasonCopying || f.Status.CheckpointID != "" {
			t.Fatalf("%s while its copy hangs: %+v, %+v", f.Name, c, f.Status)
		}
	}
	e.reconcile(r, quick)
	e.get(quick)
	if c := condition(t, quick.Status.Conditions, zygov1.ConditionComplete); c.Status != metav1.ConditionTrue || quick.Status.Succeeded != 1 {
		t.Fatalf("the same-node fork was not made while the copies hang: %+v", c)
	}

	// gone is deleted while its copy hangs: its op is cancelled, and the finalizer waits for it.
	if err := e.c.Delete(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := r.Reconcile(context.Background(), reqOf(gone))
		if err != nil {
			t.Fatal(err)
		}
		if res.RequeueAfter == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deleting gone while its copy hangs: still %+v after 10s", res)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var left zygov1.SandboxFork
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(gone), &left); err == nil {
		t.Fatalf("gone still exists: %+v", left.ObjectMeta)
	}

	close(hang)
	if op := r.ops.get(slow.UID); op != nil && !op.ended(10*time.Second) {
		t.Fatal("slow's copy did not end")
	}
	e.reconcile(r, slow)
	e.get(slow)
	if c := condition(t, slow.Status.Conditions, zygov1.ConditionComplete); c.Status != metav1.ConditionTrue || slow.Status.Succeeded != 2 || slow.Status.NodeName != "b" {
		t.Fatalf("slow after its copy ended: %+v, %+v", c, slow.Status)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.sandboxes) != 2 || len(b.images) != 1 {
		t.Fatalf("node b: %d sandboxes, images %v; want slow's 2 copies and its one image (nothing of gone)", len(b.sandboxes), b.images)
	}
}
