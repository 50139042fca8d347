package controller

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	extv1 "github.com/zygo-run/zygo/internal/kube/api/extensions/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	zygosecret "github.com/zygo-run/zygo/internal/secret"
)

func decodeTOML(b []byte, v any) (toml.MetaData, error) { return toml.Decode(string(b), v) }

// condition returns the condition typ of conds, failing the test when it is absent.
func condition(t *testing.T, conds []metav1.Condition, typ string) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		t.Fatalf("no %s condition in %+v", typ, conds)
	}
	return *c
}

func TestSandboxCreatedOnLeastLoadedNode(t *testing.T) {
	busy := &agentsv1.Sandbox{ObjectMeta: objMeta("busy"), Status: agentsv1.SandboxStatus{NodeName: "a"}}
	mem, cpu := resource.MustParse("128Mi"), resource.MustParse("500m")
	sb := &agentsv1.Sandbox{ObjectMeta: objMeta("sb"), Spec: agentsv1.SandboxSpec{Zygo: agentsv1.ZygoSandboxSpec{
		Limits:  agentsv1.Limits{Memory: &mem, CPU: &cpu},
		Env:     []agentsv1.EnvVar{{Name: "A", Value: "1"}},
		Secrets: []agentsv1.SecretFile{{Name: "KEY", SecretKeyRef: agentsv1.SecretKeySelector{Name: "s", Key: "k"}}},
	}}}
	e := newEnv(t, busy, sb, secret("s", "k", "v1"))
	r := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(r, sb)
	e.get(sb)
	if c := condition(t, sb.Status.Conditions, agentsv1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Fatalf("Ready = %+v, want True", c)
	}
	if sb.Status.NodeName != "b" {
		t.Fatalf("placed on %q, want b (a holds a sandbox already)", sb.Status.NodeName)
	}
	b := e.agents["b"]
	if len(b.creates) != 1 {
		t.Fatalf("node b got %d creates, want 1", len(b.creates))
	}
	o := b.creates[0]
	sname := NodeSecretName("ns", sb.Spec.Zygo.Secrets[0])
	if o.Name != "k8s-uid-sb" || o.MemoryMiB != 128 || o.CPUs != 0.5 || len(o.Secrets) != 1 || o.Secrets[0] != sname {
		t.Fatalf("create options %+v", o)
	}
	if string(b.secrets[sname]) != "v1" {
		t.Fatalf("secret on node = %q, want v1", b.secrets[sname])
	}
	if strings.Contains(strings.Join(o.Env, " "), "ZYGO_") {
		t.Fatalf("env %v names a variable the daemon reserves", o.Env)
	}
	if sb.Status.Zygo.SandboxID == "" || sb.Status.PodIPs[0] != "10.0.0.1" || len(e.agents["a"].creates) != 0 {
		t.Fatalf("status %+v", sb.Status)
	}
}

func TestSandboxNodeUnreachableMakesNothing(t *testing.T) {
	sb := &agentsv1.Sandbox{ObjectMeta: objMeta("sb"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	e := newEnv(t, sb)
	e.agents["a"].down = true
	r := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(r, sb)
	e.get(sb)
	c := condition(t, sb.Status.Conditions, agentsv1.ConditionReady)
	if c.Status != metav1.ConditionFalse || c.Reason != agentsv1.ReasonNodeUnreachable || !strings.Contains(c.Message, "connection refused") {
		t.Fatalf("Ready = %+v, want False NodeUnreachable with the agent's error", c)
	}
	if len(e.agents["a"].sandboxes)+len(e.agents["b"].sandboxes) != 0 {
		t.Fatal("a sandbox was made")
	}
	// The agent answers again: the sandbox is made once, on the node recorded before.
	e.agents["a"].down = false
	e.reconcile(r, sb)
	e.get(sb)
	if c := condition(t, sb.Status.Conditions, agentsv1.ConditionReady); c.Status != metav1.ConditionTrue || sb.Status.NodeName != "a" {
		t.Fatalf("after recovery: %+v on %s", c, sb.Status.NodeName)
	}
}

func TestSandboxLostAnswerIsAdoptedNotMadeTwice(t *testing.T) {
	sb := &agentsv1.Sandbox{ObjectMeta: objMeta("sb"), Status: agentsv1.SandboxStatus{NodeName: "a"}}
	e := newEnv(t, sb)
	// The create landed, its answer did not.
	if _, err := e.agents["a"].CreateSandbox(context.Background(), wireCreate("k8s-uid-sb")); err != nil {
		t.Fatal(err)
	}
	r := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(r, sb)
	e.get(sb)
	if len(e.agents["a"].creates) != 1 || len(e.agents["a"].sandboxes) != 1 {
		t.Fatalf("node a has %d sandboxes after %d creates, want 1 and 1", len(e.agents["a"].sandboxes), len(e.agents["a"].creates))
	}
	if c := condition(t, sb.Status.Conditions, agentsv1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Fatalf("Ready = %+v", c)
	}
}

func TestSandboxDeleteCleansNode(t *testing.T) {
	sb := &agentsv1.Sandbox{ObjectMeta: objMeta("sb")}
	e := newEnv(t, sb)
	r := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(r, sb)
	e.get(sb)
	node := e.agents[sb.Status.NodeName]
	if len(node.sandboxes) != 1 {
		t.Fatalf("node %s has %d sandboxes", sb.Status.NodeName, len(node.sandboxes))
	}
	if err := e.c.Delete(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	e.reconcile(r, sb)
	if len(node.sandboxes) != 0 {
		t.Fatalf("node still has %v", node.sandboxes)
	}
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(sb), sb); !apierrors.IsNotFound(err) {
		t.Fatalf("the Sandbox is still there (%v): the finalizer was not removed", err)
	}
}

func TestSandboxNodeLostSaysSo(t *testing.T) {
	sb := &agentsv1.Sandbox{ObjectMeta: objMeta("sb"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	e := newEnv(t, sb)
	r := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(r, sb)
	e.agents["a"].down = true
	e.reconcile(r, sb)
	e.get(sb)
	if c := condition(t, sb.Status.Conditions, agentsv1.ConditionReady); c.Reason != agentsv1.ReasonNodeLost {
		t.Fatalf("Ready = %+v, want NodeLost", c)
	}
}

func TestClaimMissingTemplate(t *testing.T) {
	cl := &extv1.SandboxClaim{ObjectMeta: objMeta("cl"), Spec: extv1.SandboxClaimSpec{TemplateRef: extv1.SandboxTemplateRef{Name: "nope"}}}
	e := newEnv(t, cl)
	e.reconcile(&ClaimReconciler{Client: e.c}, cl)
	e.get(cl)
	c := condition(t, cl.Status.Conditions, agentsv1.ConditionReady)
	if c.Reason != extv1.ReasonTemplateNotFound || !strings.Contains(c.Message, "spec.sandboxTemplateRef.name") {
		t.Fatalf("Ready = %+v, want TemplateNotFound naming the field", c)
	}
	var sbs agentsv1.SandboxList
	if err := e.c.List(context.Background(), &sbs); err != nil || len(sbs.Items) != 0 {
		t.Fatalf("Sandboxes: %v, %v; want none", sbs.Items, err)
	}
}

func TestClaimColdAndWarm(t *testing.T) {
	tpl := &extv1.SandboxTemplate{ObjectMeta: objMeta("tpl"), Spec: extv1.SandboxTemplateSpec{Zygo: agentsv1.ZygoSandboxSpec{Env: []agentsv1.EnvVar{{Name: "T", Value: "1"}}}}}
	cold := &extv1.SandboxClaim{ObjectMeta: objMeta("cold"), Spec: extv1.SandboxClaimSpec{TemplateRef: extv1.SandboxTemplateRef{Name: "tpl"}}}
	pool := &extv1.SandboxWarmPool{ObjectMeta: objMeta("pool"), Spec: extv1.SandboxWarmPoolSpec{Replicas: 1, TemplateRef: extv1.SandboxTemplateRef{Name: "tpl"}}}
	e := newEnv(t, tpl, cold)
	cr := &ClaimReconciler{Client: e.c}
	e.reconcile(cr, cold)
	var sb agentsv1.Sandbox
	sb.Namespace, sb.Name = "ns", "cold"
	e.get(&sb)
	if sb.Annotations[AnnotationForkFrom] != "" || len(sb.Spec.Zygo.Env) != 1 || !metav1.IsControlledBy(&sb, cold) {
		t.Fatalf("cold claim's Sandbox: %+v", sb.ObjectMeta)
	}

	// A warm pool: its source runs and is checkpointed; the next claim forks it.
	e.create(pool)
	pr := &WarmPoolReconciler{Client: e.c, Dialer: e.agents}
	sr := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(pr, pool)
	src := &agentsv1.Sandbox{}
	src.Namespace, src.Name = "ns", sourceName("pool", 0)
	e.get(src)
	e.reconcile(sr, src)
	e.reconcile(pr, pool)
	e.get(pool)
	if pool.Status.ReadyReplicas != 1 {
		t.Fatalf("pool status %+v", pool.Status)
	}
	warm := &extv1.SandboxClaim{ObjectMeta: objMeta("warm"), Spec: extv1.SandboxClaimSpec{TemplateRef: extv1.SandboxTemplateRef{Name: "tpl"}}}
	e.create(warm)
	e.reconcile(cr, warm)
	var wsb agentsv1.Sandbox
	wsb.Namespace, wsb.Name = "ns", "warm"
	e.get(&wsb)
	if !strings.Contains(wsb.Annotations[AnnotationForkFrom], "/cp-warm-") {
		t.Fatalf("warm claim's Sandbox annotations %v, want a fork of the pool's checkpoint", wsb.Annotations)
	}
	e.reconcile(sr, &wsb)
	e.get(&wsb)
	if c := condition(t, wsb.Status.Conditions, agentsv1.ConditionReady); c.Status != metav1.ConditionTrue || wsb.Status.Zygo.ParentID == "" {
		t.Fatalf("warm Sandbox: %+v, status %+v", c, wsb.Status.Zygo)
	}
	e.reconcile(cr, warm)
	e.get(warm)
	if warm.Status.SandboxStatus.LaunchType != LaunchWarm || condition(t, warm.Status.Conditions, agentsv1.ConditionReady).Status != metav1.ConditionTrue {
		t.Fatalf("warm claim status %+v", warm.Status)
	}
}

func TestForkMakesChildren(t *testing.T) {
	e := newEnv(t)
	src := &agentsv1.Sandbox{ObjectMeta: objMeta("src"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	e.create(src)
	e.reconcile(&SandboxReconciler{Client: e.c, Dialer: e.agents}, src)
	f := &zygov1.SandboxFork{ObjectMeta: objMeta("f"), Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: "src"}, Count: 3}}
	e.create(f)
	e.reconcile(&ForkReconciler{Client: e.c, Dialer: e.agents}, f)
	e.get(f)
	if f.Status.Succeeded != 3 || len(f.Status.Children) != 3 || f.Status.NodeName != "a" {
		t.Fatalf("fork status %+v", f.Status)
	}
	for _, ch := range f.Status.Children {
		var sb agentsv1.Sandbox
		sb.Namespace, sb.Name = "ns", ch.Sandbox
		e.get(&sb)
		if sb.Annotations[agentsv1.AnnotationSandboxID] != ch.SandboxID || sb.Labels[LabelFork] != "f" {
			t.Fatalf("child %s: %+v", ch.Sandbox, sb.ObjectMeta)
		}
		// The copy is named for the fork and its index; its Sandbox adopts it as its own.
		if rec := e.agents["a"].sandboxes[ch.SandboxID]; rec.Name != forkCopyName(f.UID, int(ch.Index)) {
			t.Errorf("copy %d named %q, want %q", ch.Index, rec.Name, forkCopyName(f.UID, int(ch.Index)))
		}
		e.reconcile(&SandboxReconciler{Client: e.c, Dialer: e.agents}, &sb)
		e.get(&sb)
		if c := condition(t, sb.Status.Conditions, agentsv1.ConditionReady); c.Status != metav1.ConditionTrue {
			t.Errorf("copy %s: Ready %+v", sb.Name, c)
		}
	}
}

func TestFunctionDeployScaleAndRoute(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "code"}, Data: map[string]string{"main.py": "def handler(e, c):\n    return e\n"}}
	fn := &zygov1.Function{ObjectMeta: objMeta("hello"), Spec: zygov1.FunctionSpec{Runtime: "python", Handler: "main:handler",
		Source: zygov1.FunctionSource{ConfigMap: &zygov1.ConfigMapSource{Name: "code"}}, Replicas: 1,
		Limits: zygov1.FunctionLimits{TimeoutMs: 5000}}}
	e := newEnv(t, cm, fn)
	r := &FunctionReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(r, fn)
	e.get(fn)
	if fn.Status.ReadyReplicas != 1 || condition(t, fn.Status.Conditions, zygov1.ConditionReady).Status != metav1.ConditionTrue {
		t.Fatalf("status %+v", fn.Status)
	}
	name := nodeFunctionName("ns", "hello")
	b, ok := e.agents[fn.Status.Nodes[0].Name].functions[name]
	if !ok {
		t.Fatalf("node %s has no function %s", fn.Status.Nodes[0].Name, name)
	}
	files, err := untar(b)
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if _, err := decodeTOML(files["zygo.toml"], &m); err != nil {
		t.Fatal(err)
	}
	if m.Name != name || m.Runtime != "python" || m.Limits.TimeoutMs != 5000 || string(files["main.py"]) != cm.Data["main.py"] {
		t.Fatalf("bundle: manifest %+v, files %v", m, files)
	}

	fn.Spec.Replicas = 2
	if err := e.c.Update(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
	e.reconcile(r, fn)
	e.get(fn)
	if fn.Status.ReadyReplicas != 2 || len(e.agents["a"].functions) != 1 || len(e.agents["b"].functions) != 1 {
		t.Fatalf("after scaling to 2: %+v", fn.Status)
	}

	rt := &Route{Reader: e.c, Dialer: e.agents, Auth: &fakeReviewer{users: map[string]string{"tok": "alice"}, allow: map[string]bool{"alice ns/hello": true, "alice ns/nope": true}}}
	srv := httptest.NewServer(rt.Handler())
	defer srv.Close()
	seen := map[string]bool{}
	for range 4 {
		resp, err := postAuth(srv.URL+RoutePath("ns", "hello"), "tok", `{"x":1}`)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"event":{"x":1}`) {
			t.Fatalf("invoke: %d %s", resp.StatusCode, body)
		}
		seen[resp.Header.Get(NodeHeader)] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("the route served from %v, want both nodes", seen)
	}
	resp, err := postAuth(srv.URL+RoutePath("ns", "nope"), "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown function: %d, want 404", resp.StatusCode)
	}
}

func TestFunctionOCIBadReference(t *testing.T) {
	fn := &zygov1.Function{ObjectMeta: objMeta("f"), Spec: zygov1.FunctionSpec{Runtime: "python", Handler: "main:handler",
		Source: zygov1.FunctionSource{OCI: &zygov1.OCISource{Reference: "r/x@sha256:00"}}, Replicas: 1}}
	e := newEnv(t, fn)
	e.reconcile(&FunctionReconciler{Client: e.c, Dialer: e.agents}, fn)
	e.get(fn)
	if c := condition(t, fn.Status.Conditions, zygov1.ConditionReady); c.Reason != zygov1.ReasonSourceFailed || !strings.Contains(c.Message, "spec.source.oci.reference") {
		t.Fatalf("Ready = %+v", c)
	}
	if len(e.agents["a"].functions)+len(e.agents["b"].functions) != 0 {
		t.Fatal("something was deployed")
	}
}

func TestPlanNodes(t *testing.T) {
	ready := []zygov1.ZygoNode{*readyNode("a"), *readyNode("c")}
	cur := []zygov1.FunctionNode{{Name: "b"}, {Name: "c"}} // b died
	keep, drop := planNodes(cur, ready, 2)
	if strings.Join(keep, ",") != "c,a" || len(drop) != 0 {
		t.Fatalf("keep %v drop %v", keep, drop)
	}
	keep, drop = planNodes([]zygov1.FunctionNode{{Name: "a"}, {Name: "c"}}, ready, 1)
	if strings.Join(keep, ",") != "a" || strings.Join(drop, ",") != "c" {
		t.Fatalf("scale down: keep %v drop %v", keep, drop)
	}
}

func TestNodeProbe(t *testing.T) {
	e := newEnv(t)
	e.agents["b"].down = true
	r := &NodeReconciler{Client: e.c, Dialer: e.agents}
	for _, name := range []string{"a", "b"} {
		n := &zygov1.ZygoNode{}
		n.Name = name
		e.reconcile(r, n)
		e.get(n)
		c := condition(t, n.Status.Conditions, zygov1.ConditionReady)
		if want := name == "a"; (c.Status == metav1.ConditionTrue) != want {
			t.Fatalf("node %s: %+v", name, c)
		}
	}
}

func TestNodeCollectsLeftovers(t *testing.T) {
	kept := &agentsv1.Sandbox{ObjectMeta: objMeta("kept")}
	e := newEnv(t, kept)
	a := e.agents["a"]
	ctx := context.Background()
	for _, n := range []string{"k8s-uid-kept", "k8s-uid-gone", "by-hand"} {
		if _, err := a.CreateSandbox(ctx, wireCreate(n)); err != nil {
			t.Fatal(err)
		}
	}
	n := &zygov1.ZygoNode{}
	n.Name = "a"
	e.reconcile(&NodeReconciler{Client: e.c, Dialer: e.agents}, n)
	var names []string
	for _, s := range a.sandboxes {
		names = append(names, s.Name)
	}
	if len(names) != 2 || strings.Contains(strings.Join(names, ","), "gone") {
		t.Fatalf("node a keeps %v, want k8s-uid-kept and by-hand", names)
	}
}

// TestCheckpointDeleteWaitsForCopiesAndNode: a deleted Checkpoint keeps its finalizer, with
// the reason in Ready, while the agent refuses to remove the image (a copy restored from it
// still exists) and while its node is not Ready; it goes once the image is removed, or with a
// ZygoNode that no longer exists.
func TestCheckpointDeleteWaitsForCopiesAndNode(t *testing.T) {
	ctx := context.Background()
	src := &agentsv1.Sandbox{ObjectMeta: objMeta("src")}
	e := newEnv(t, src)
	sr := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(sr, src)
	e.get(src)
	cp := &zygov1.Checkpoint{ObjectMeta: objMeta("cp"), Spec: zygov1.CheckpointSpec{SandboxRef: zygov1.LocalRef{Name: "src"}}}
	e.create(cp)
	cr := &CheckpointReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(cr, cp)
	e.get(cp)
	a := e.agents[cp.Status.NodeName]
	if cp.Status.CheckpointID == "" || !a.images[cp.Status.CheckpointID] {
		t.Fatalf("checkpoint status %+v, node images %v", cp.Status, a.images)
	}
	ans, err := a.Fork(ctx, src.Status.Zygo.SandboxID, 1, cp.Status.CheckpointID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, cp); err != nil {
		t.Fatal(err)
	}
	deleting := func(reason string) {
		t.Helper()
		res := e.reconcile(cr, cp)
		e.get(cp)
		c := condition(t, cp.Status.Conditions, zygov1.ConditionReady)
		if res.RequeueAfter == 0 || c.Status != metav1.ConditionFalse || c.Reason != reason || !a.images[cp.Status.CheckpointID] {
			t.Fatalf("while deleting: requeue %v, Ready %+v, image kept %v; want a retry, reason %s, the image kept",
				res.RequeueAfter, c, a.images[cp.Status.CheckpointID], reason)
		}
	}
	deleting(zygov1.ReasonInUse)

	// The node stops answering: still kept, never orphaned.
	node := &zygov1.ZygoNode{ObjectMeta: metav1.ObjectMeta{Name: cp.Status.NodeName}}
	e.get(node)
	meta.SetStatusCondition(&node.Status.Conditions, metav1.Condition{Type: zygov1.ConditionReady, Status: metav1.ConditionFalse, Reason: zygov1.ReasonAgentUnreachable})
	if err := e.c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	deleting(zygov1.ReasonRemoveFailed)
	meta.SetStatusCondition(&node.Status.Conditions, metav1.Condition{Type: zygov1.ConditionReady, Status: metav1.ConditionTrue, Reason: zygov1.ReasonAgentReady})
	if err := e.c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	deleting(zygov1.ReasonInUse)

	// The copy is gone: the image is removed, then the finalizer.
	if err := a.RemoveSandbox(ctx, ans.Children[0].Sandbox.ID); err != nil {
		t.Fatal(err)
	}
	e.reconcile(cr, cp)
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(cp), cp); !apierrors.IsNotFound(err) {
		t.Fatalf("the Checkpoint after its image was removed: %v, want it gone", err)
	}
	if len(a.images) != 0 {
		t.Fatalf("node images %v, want none", a.images)
	}

	// A Checkpoint whose ZygoNode no longer exists goes: its image is lost with the node.
	lost := &zygov1.Checkpoint{ObjectMeta: objMeta("lost"), Spec: zygov1.CheckpointSpec{SandboxRef: zygov1.LocalRef{Name: "src"}}}
	e.create(lost)
	e.reconcile(cr, lost)
	e.get(lost)
	if err := e.c.Delete(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, lost); err != nil {
		t.Fatal(err)
	}
	e.reconcile(cr, lost)
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(lost), lost); !apierrors.IsNotFound(err) {
		t.Fatalf("a Checkpoint whose node is gone: %v, want it gone", err)
	}
}

// TestFunctionSecretsAreZygoSecrets: a Function's Kubernetes Secret is stored on the node as
// a Zygo secret named per namespace and listed in the manifest's secrets, and no reserved
// ZYGO_ variable is written into [env].
func TestFunctionSecretsAreZygoSecrets(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "code"}, Data: map[string]string{"main.py": "def handler(e, c):\n    return e\n"}}
	fn := &zygov1.Function{ObjectMeta: objMeta("hello"), Spec: zygov1.FunctionSpec{Runtime: "python", Handler: "main:handler",
		Source: zygov1.FunctionSource{ConfigMap: &zygov1.ConfigMapSource{Name: "code"}}, Replicas: 1,
		Env:     []agentsv1.EnvVar{{Name: "A", Value: "1"}},
		Secrets: []agentsv1.SecretFile{{Name: "KEY", SecretKeyRef: agentsv1.SecretKeySelector{Name: "s", Key: "k"}}}}}
	e := newEnv(t, cm, fn, secret("s", "k", "v1"))
	r := &FunctionReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(r, fn)
	e.get(fn)
	if fn.Status.ReadyReplicas != 1 {
		t.Fatalf("status %+v", fn.Status)
	}
	a := e.agents[fn.Status.Nodes[0].Name]
	sname := NodeSecretName("ns", fn.Spec.Secrets[0])
	longest := NodeSecretName("a-namespace-of-63-characters-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		agentsv1.SecretFile{Name: strings.Repeat("N", 101), SecretKeyRef: agentsv1.SecretKeySelector{Name: "s", Key: "k"}})
	if re := regexp.MustCompile(`^` + zygosecret.NamePattern + `$`); !re.MatchString(sname) || !re.MatchString(longest) {
		t.Fatalf("node secret names %q, %q do not match the daemon's %s", sname, longest, zygosecret.NamePattern)
	}
	otherNS := NodeSecretName("other", fn.Spec.Secrets[0])
	otherSecret := NodeSecretName("ns", agentsv1.SecretFile{Name: "KEY", SecretKeyRef: agentsv1.SecretKeySelector{Name: "s2", Key: "k"}})
	if string(a.secrets[sname]) != "v1" || sname == otherNS || sname == otherSecret || !strings.HasSuffix(sname, "_KEY") {
		t.Fatalf("node secrets %v, want %s = v1 (a name of its own per namespace and per Secret)", a.secrets, sname)
	}
	files, err := untar(a.functions[nodeFunctionName("ns", "hello")])
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if _, err := decodeTOML(files["zygo.toml"], &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Secrets) != 1 || m.Secrets[0] != sname || len(m.Env) != 1 || m.Env["A"] != "1" {
		t.Fatalf("manifest secrets %v, env %v; want [%s] and only A", m.Secrets, m.Env, sname)
	}
}

// TestSandboxForeignAnnotationsRefused: a Sandbox annotated with another object's node-side
// sandbox (adoption) or with a fork source the controller did not record for its namespace is
// refused with InvalidSpec, and neither it nor its deletion touches the victim's sandbox.
func TestSandboxForeignAnnotationsRefused(t *testing.T) {
	victim := &agentsv1.Sandbox{ObjectMeta: objMeta("victim"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	e := newEnv(t, victim)
	r := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(r, victim)
	e.reconcile(r, victim)
	e.get(victim)
	id := victim.Status.Zygo.SandboxID
	if id == "" {
		t.Fatalf("victim not made: %+v", victim.Status)
	}
	node := e.agents["a"]
	ck, err := node.Checkpoint(context.Background(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	thieves := map[string]map[string]string{
		"adopt": {agentsv1.AnnotationNode: "a", agentsv1.AnnotationSandboxID: id},
		"fork":  {AnnotationForkFrom: "a/" + id + "/" + ck.ID},
	}
	for name, ann := range thieves {
		thief := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "evil", Name: name, UID: types.UID("uid-evil-" + name), Annotations: ann}}
		e.create(thief)
		e.reconcile(r, thief)
		e.get(thief)
		c := condition(t, thief.Status.Conditions, agentsv1.ConditionReady)
		if c.Status != metav1.ConditionFalse || c.Reason != agentsv1.ReasonInvalidSpec || thief.Status.Zygo.SandboxID != "" || thief.Status.NodeName != "" {
			t.Fatalf("%s: Ready %+v, status %+v: want InvalidSpec and nothing recorded", name, c, thief.Status)
		}
		if err := e.c.Delete(context.Background(), thief); err != nil {
			t.Fatal(err)
		}
		e.reconcile(r, thief)
		if _, ok := node.find(id); !ok || !node.images[ck.ID] {
			t.Fatalf("%s: deleting the thief removed the victim's sandbox or checkpoint", name)
		}
	}
	if node.forks != 0 || len(node.sandboxes) != 1 {
		t.Fatalf("node made %d forks and holds %d sandboxes, want 0 and 1", node.forks, len(node.sandboxes))
	}
}

// TestNodeDeleteWaitsForWhatItHolds: a ZygoNode deleted while its agent answers stays
// (Deleting) until the Sandboxes placed on it are deleted, and those still remove their
// sandbox on it; a node whose agent does not answer goes at once (KUBE-FINDINGS F8).
func TestNodeDeleteWaitsForWhatItHolds(t *testing.T) {
	sb := &agentsv1.Sandbox{ObjectMeta: objMeta("sb"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	e := newEnv(t, sb)
	sr := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	nr := &NodeReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(sr, sb)
	a := &zygov1.ZygoNode{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	e.reconcile(nr, a)
	e.get(a)
	if err := e.c.Delete(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	e.reconcile(nr, a)
	e.get(a)
	if c := condition(t, a.Status.Conditions, zygov1.ConditionReady); c.Reason != zygov1.ReasonDeleting || !strings.Contains(c.Message, "Sandbox ns/sb") {
		t.Fatalf("deleted node with a Sandbox on it: %+v", c)
	}
	if err := e.c.Delete(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	e.reconcile(sr, sb)
	if n := len(e.agents["a"].sandboxes); n != 0 {
		t.Fatalf("the Sandbox went and left %d sandboxes on the deleting node", n)
	}
	e.reconcile(nr, a)
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(a), a); !apierrors.IsNotFound(err) {
		t.Fatalf("node a still there with nothing on it: %v", err)
	}

	// An agent that does not answer: the node goes, and its Sandbox then lets go unasked.
	sb2 := &agentsv1.Sandbox{ObjectMeta: objMeta("sb2"), Spec: agentsv1.SandboxSpec{NodeName: "b"}}
	e.create(sb2)
	e.reconcile(sr, sb2)
	b := &zygov1.ZygoNode{ObjectMeta: metav1.ObjectMeta{Name: "b"}}
	e.reconcile(nr, b)
	e.agents["b"].down = true
	if err := e.c.Delete(context.Background(), sb2); err != nil {
		t.Fatal(err)
	}
	if _, err := sr.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(sb2)}); err == nil {
		t.Fatal("a Sandbox on an existing node that does not answer let go without removing its sandbox")
	}
	e.get(b)
	if err := e.c.Delete(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	e.reconcile(nr, b)
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(b), b); !apierrors.IsNotFound(err) {
		t.Fatalf("node b (agent down) still there: %v", err)
	}
	e.reconcile(sr, sb2)
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(sb2), sb2); !apierrors.IsNotFound(err) {
		t.Fatalf("sb2 still there after its node went: %v", err)
	}
}
