package controller

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
)

// Deleting a same-node SandboxFork removes the image it took (tag "fork"), once the copies
// restored from it are gone; it waits while the agent refuses.
func TestSameNodeForkImageRemovedOnDelete(t *testing.T) {
	ctx := context.Background()
	src := &agentsv1.Sandbox{ObjectMeta: objMeta("src"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	f := &zygov1.SandboxFork{ObjectMeta: objMeta("f"), Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: "src"}, Count: 2}}
	e := newEnv(t, src, f)
	e.reconcile(&SandboxReconciler{Client: e.c, Dialer: e.agents}, src)
	r := &ForkReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(r, f)
	e.get(f)
	a := e.agents["a"]
	img := f.Status.CheckpointID
	if f.Status.Succeeded != 2 || img == "" || !a.images[img] {
		t.Fatalf("fork status %+v; images %v", f.Status, a.images)
	}
	if err := e.c.Delete(ctx, f); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Reconcile(ctx, reqOf(f)); err != nil || res.RequeueAfter != time.Second {
		t.Fatalf("deleting: %+v, %v; want a wait for the copies' Sandboxes", res, err)
	}
	res, err := r.Reconcile(ctx, reqOf(f))
	if err != nil || res.RequeueAfter != removeRetry || !a.images[img] {
		t.Fatalf("deleting with copies left: %+v, %v; image kept %v", res, err, a.images[img])
	}
	for _, ch := range f.Status.Children {
		if err := a.RemoveSandbox(ctx, ch.SandboxID); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := r.Reconcile(ctx, reqOf(f)); err != nil || res.RequeueAfter != 0 {
		t.Fatalf("deleting once the copies are gone: %+v, %v", res, err)
	}
	if a.images[img] {
		t.Errorf("the deleted SandboxFork's image %s is still on node a (images %v)", img, a.images)
	}
}

// A same-node SandboxFork given a Checkpoint by spec.checkpointRef leaves that image alone
// when deleted: it is the Checkpoint's.
func TestSameNodeForkKeepsGivenCheckpoint(t *testing.T) {
	ctx := context.Background()
	src := &agentsv1.Sandbox{ObjectMeta: objMeta("src"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	e := newEnv(t, src)
	e.reconcile(&SandboxReconciler{Client: e.c, Dialer: e.agents}, src)
	e.get(src)
	a := e.agents["a"]
	given, err := a.Checkpoint(ctx, src.Status.Zygo.SandboxID, "users")
	if err != nil {
		t.Fatal(err)
	}
	f := &zygov1.SandboxFork{ObjectMeta: objMeta("f"), Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: "src"}, Count: 1}}
	e.create(f)
	e.get(f)
	f.Status.NodeName, f.Status.CheckpointID = "a", given.ID // as a fork from a checkpointRef records it
	f.Spec.CheckpointRef = &zygov1.LocalRef{Name: "cp"}
	r := &ForkReconciler{Client: e.c, Dialer: e.agents}
	if wait, err := r.removeImage(ctx, f); err != nil || wait != 0 {
		t.Fatalf("removeImage: %v, %v", wait, err)
	}
	if !a.images[given.ID] {
		t.Errorf("a fork given Checkpoint image %s removed it", given.ID)
	}
	// Without checkpointRef, an image not tagged "fork" is not the fork's either.
	f.Spec.CheckpointRef = nil
	if wait, err := r.removeImage(ctx, f); err != nil || wait != 0 || !a.images[given.ID] {
		t.Errorf("removeImage of an image tagged %q: %v, %v; kept %v", given.Tag, wait, err, a.images[given.ID])
	}
}

// A fork whose every copy fails removes the image that try took: failing tries do not pile
// images up on the node.
func TestFailedForkTriesLeaveNoImages(t *testing.T) {
	src := &agentsv1.Sandbox{ObjectMeta: objMeta("src"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	f := &zygov1.SandboxFork{ObjectMeta: objMeta("f"), Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: "src"}, Count: 1}}
	e := newEnv(t, src, f)
	e.reconcile(&SandboxReconciler{Client: e.c, Dialer: e.agents}, src)
	a := e.agents["a"]
	a.failForks = 3
	r := &ForkReconciler{Client: e.c, Dialer: e.agents}
	for range 3 {
		e.reconcile(r, f)
	}
	e.get(f)
	if a.forks != 3 || f.Status.CheckpointID != "" {
		t.Fatalf("forks %d, status %+v: want 3 failed tries", a.forks, f.Status)
	}
	if len(a.images) != 0 {
		t.Errorf("after 3 failed fork tries node a keeps images %v", a.images)
	}
	e.reconcile(r, f)
	e.get(f)
	if f.Status.Succeeded != 1 || len(a.images) != 1 || !a.images[f.Status.CheckpointID] {
		t.Errorf("the fourth try: status %+v, images %v", f.Status, a.images)
	}
}

// A Checkpoint whose spec.tag changed after its image was taken (an object written before the
// schema made it immutable) still removes its image when deleted: it goes by the tag recorded
// in status.tag at creation, not the current spec.
func TestCheckpointTagChangedStillRemovesImage(t *testing.T) {
	ctx := context.Background()
	src := &agentsv1.Sandbox{ObjectMeta: objMeta("src")}
	e := newEnv(t, src)
	e.reconcile(&SandboxReconciler{Client: e.c, Dialer: e.agents}, src)
	cp := &zygov1.Checkpoint{ObjectMeta: objMeta("cp"), Spec: zygov1.CheckpointSpec{SandboxRef: zygov1.LocalRef{Name: "src"}}}
	e.create(cp)
	cr := &CheckpointReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(cr, cp)
	e.get(cp)
	a := e.agents[cp.Status.NodeName]
	id := cp.Status.CheckpointID
	if id == "" || !a.images[id] || cp.Status.Tag != "k8s-"+string(cp.UID) {
		t.Fatalf("checkpoint status %+v, node images %v", cp.Status, a.images)
	}
	cp.Spec.Tag = "renamed" // the fake client does not run the CRD's CEL rule
	if err := e.c.Update(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, cp); err != nil {
		t.Fatal(err)
	}
	e.reconcile(cr, cp)
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(cp), cp); !apierrors.IsNotFound(err) {
		t.Fatalf("the Checkpoint is still there: %v", err)
	}
	if a.images[id] {
		t.Errorf("the deleted Checkpoint's image %s is still on node %s", id, a.name)
	}
}

// A SandboxFork whose copy's Sandbox name (FORK-i) is taken by an object it does not control
// removes that copy from the node and says so (Complete=False, NameTaken naming the object),
// rather than leave the copy running with no Sandbox recording it.
func TestForkCopyNameSquatted(t *testing.T) {
	src := &agentsv1.Sandbox{ObjectMeta: objMeta("src"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	squat := &agentsv1.Sandbox{ObjectMeta: objMeta("f-0"), Spec: agentsv1.SandboxSpec{NodeName: "elsewhere"}}
	f := &zygov1.SandboxFork{ObjectMeta: objMeta("f"), Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: "src"}, Count: 2}}
	e := newEnv(t, src, squat, f)
	e.reconcile(&SandboxReconciler{Client: e.c, Dialer: e.agents}, src)
	r := &ForkReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(r, f)
	e.get(f)
	a := e.agents["a"]
	c := condition(t, f.Status.Conditions, zygov1.ConditionComplete)
	if c.Status != metav1.ConditionFalse || c.Reason != zygov1.ReasonNameTaken || !strings.Contains(c.Message, "ns/f-0") {
		t.Errorf("Complete = %+v; want False, NameTaken naming ns/f-0", c)
	}
	if f.Status.Succeeded != 1 || f.Status.Failed != 1 || len(f.Status.Children) != 2 {
		t.Fatalf("status %+v", f.Status)
	}
	ch0, ch1 := f.Status.Children[0], f.Status.Children[1]
	if ch0.SandboxID != "" || ch0.Sandbox != "" || ch0.Error == "" || ch1.SandboxID == "" {
		t.Errorf("children %+v", f.Status.Children)
	}
	a.mu.Lock()
	for id, rec := range a.sandboxes {
		if rec.Name == forkCopyName(f.UID, 0) {
			t.Errorf("copy 0 (%s) still runs on node a with no Sandbox recording it", id)
		}
	}
	a.mu.Unlock()
	e.get(squat)
	if metav1.IsControlledBy(squat, f) || squat.Spec.NodeName != "elsewhere" {
		t.Errorf("the squatting Sandbox was changed: %+v", squat.ObjectMeta)
	}
	var kid agentsv1.Sandbox
	kid.Namespace, kid.Name = "ns", ch1.Sandbox
	e.get(&kid)
	if !metav1.IsControlledBy(&kid, f) {
		t.Errorf("copy 1's Sandbox %s is not the fork's", kid.Name)
	}
	// Reconciled again: nothing changes (the copy stays removed, the condition stays).
	e.reconcile(r, f)
	e.get(f)
	if f.Status.Succeeded != 1 || condition(t, f.Status.Conditions, zygov1.ConditionComplete).Reason != zygov1.ReasonNameTaken {
		t.Errorf("after another pass: %+v", f.Status)
	}
}

// routeReq is a request to Function ns/hello from addr with a bearer token.
func routeReq(addr, token string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/functions/ns/hello/invoke", nil)
	r.RemoteAddr = addr
	r.Header.Set("Authorization", "Bearer "+token)
	return r
}

// A flood of made-up tokens from one address spends that address's review budget, not
// another's: alice, from another address, is still reviewed and allowed; the flooder is 429.
func TestRouteReviewBudgetPerClient(t *testing.T) {
	rv := &fakeReviewer{users: map[string]string{"good": "alice"}, allow: map[string]bool{"alice ns/hello": true}}
	now := time.Unix(1_800_000_000, 0)
	a := newRouteAuth(rv, 0, 0, func() time.Time { return now }, 0, 0, 0)
	limited := 0
	for i := range 2 * DefaultAuthReviewsBurst {
		if st, _ := a.check(routeReq("203.0.113.7:4000", fmt.Sprintf("junk-%d", i)), "ns", "hello"); st == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited != DefaultAuthReviewsBurst {
		t.Errorf("the flooder got %d answers 429 for %d tokens at one instant, want %d (past its burst)", limited, 2*DefaultAuthReviewsBurst, DefaultAuthReviewsBurst)
	}
	if st, msg := a.check(routeReq("198.51.100.2:5000", "good"), "ns", "hello"); st != 0 {
		t.Errorf("alice from another address after the flood: %d %q, want allowed", st, msg)
	}
	// An IPv6 flooder's neighbours in its /64 share its budget (one host holds a /64).
	for i := range DefaultAuthReviewsBurst {
		a.check(routeReq(fmt.Sprintf("[2001:db8::%x]:1", i+1), fmt.Sprintf("v6-%d", i)), "ns", "hello")
	}
	if st, _ := a.check(routeReq("[2001:db8::ffff]:1", "v6-more"), "ns", "hello"); st != http.StatusTooManyRequests {
		t.Errorf("another address of the same /64 past its burst: %d, want 429", st)
	}
}

// One address holds at most its share (a quarter) of the reviews under way; the global bound
// still holds across addresses.
func TestRouteReviewsInFlightShare(t *testing.T) {
	block := make(chan struct{})
	rv := &blockingReviewer{block: block}
	a := newRouteAuth(rv, 0, 0, nil, 1e6, 1e6, 8) // 2 per address
	var wg sync.WaitGroup
	slow := func(addr string, want int32) {
		wg.Add(1)
		go func() { defer wg.Done(); a.check(routeReq(addr, fmt.Sprintf("slow-%s-%d", addr, want)), "ns", "hello") }()
		deadline := time.Now().Add(10 * time.Second)
		for rv.started.Load() < want && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if rv.started.Load() < want {
			t.Fatalf("review %d from %s did not start", want, addr)
		}
	}
	defer func() { close(block); wg.Wait() }()
	slow("192.0.2.1:1", 1)
	slow("192.0.2.1:2", 2)
	if st, _ := a.check(routeReq("192.0.2.1:3", "third"), "ns", "hello"); st != http.StatusTooManyRequests {
		t.Errorf("a third review from an address holding its share: %d, want 429", st)
	}
	for i, addr := range []string{"192.0.2.2:1", "192.0.2.2:2", "192.0.2.3:1", "192.0.2.3:2", "192.0.2.4:1", "192.0.2.4:2"} {
		slow(addr, int32(3+i)) //nolint:gosec // small
	}
	if st, _ := a.check(routeReq("192.0.2.5:1", "ninth"), "ns", "hello"); st != http.StatusTooManyRequests {
		t.Errorf("a ninth review with 8 under way: %d, want 429", st)
	}
}
