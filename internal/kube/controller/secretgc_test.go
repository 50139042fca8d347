package controller

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
)

var keyFile = agentsv1.SecretFile{Name: "KEY", SecretKeyRef: agentsv1.SecretKeySelector{Name: "s", Key: "k"}}

// secretFunction is a Function of ns named name, on one node, with keyFile.
func secretFunction(name string) *zygov1.Function {
	return &zygov1.Function{ObjectMeta: objMeta(name), Spec: zygov1.FunctionSpec{Runtime: "python", Handler: "main:handler",
		Source: zygov1.FunctionSource{ConfigMap: &zygov1.ConfigMapSource{Name: "code"}}, Replicas: 1,
		Secrets: []agentsv1.SecretFile{keyFile}}}
}

// TestFunctionDeleteReleasesSecrets: deleting a Function removes its secret from the node once
// no other Function there names it.
func TestFunctionDeleteReleasesSecrets(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "code"}, Data: map[string]string{"main.py": "def handler(e, c):\n    return e\n"}}
	f1, f2 := secretFunction("f1"), secretFunction("f2")
	e := newEnv(t, cm, secret("s", "k", "v"), f1, f2)
	r := &FunctionReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(r, f1)
	e.reconcile(r, f2)
	e.get(f1)
	e.get(f2)
	name := NodeSecretName("ns", keyFile)
	node := f1.Status.Nodes[0].Name
	if f2.Status.Nodes[0].Name != node {
		t.Fatalf("f1 on %s, f2 on %s: the test wants one node", node, f2.Status.Nodes[0].Name)
	}
	a := e.agents[node]
	for i, f := range []*zygov1.Function{f1, f2} {
		if err := e.c.Delete(context.Background(), f); err != nil {
			t.Fatal(err)
		}
		e.reconcile(r, f)
		_, kept := a.secrets[name]
		if want := i == 0; kept != want { // f2 still names it after f1 went
			t.Fatalf("after deleting %s: secret %s kept %v, want %v", f.Name, name, kept, want)
		}
	}
}

// TestSandboxDeleteReleasesSecrets: deleting a Sandbox removes its secret from its node once no
// other Sandbox there names it.
func TestSandboxDeleteReleasesSecrets(t *testing.T) {
	mk := func(name string) *agentsv1.Sandbox {
		return &agentsv1.Sandbox{ObjectMeta: objMeta(name), Spec: agentsv1.SandboxSpec{NodeName: "a",
			Zygo: agentsv1.ZygoSandboxSpec{Secrets: []agentsv1.SecretFile{keyFile}}}}
	}
	s1, s2 := mk("s1"), mk("s2")
	e := newEnv(t, secret("s", "k", "v"), s1, s2)
	r := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	for _, s := range []*agentsv1.Sandbox{s1, s2} {
		e.reconcile(r, s)
		e.reconcile(r, s)
	}
	name := NodeSecretName("ns", keyFile)
	a := e.agents["a"]
	if _, ok := a.secrets[name]; !ok || len(a.sandboxes) != 2 {
		t.Fatalf("node a: secrets %v, %d sandboxes; want %s and 2", a.secrets, len(a.sandboxes), name)
	}
	for i, s := range []*agentsv1.Sandbox{s1, s2} {
		if err := e.c.Delete(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		e.reconcile(r, s)
		_, kept := a.secrets[name]
		if want := i == 0; kept != want {
			t.Fatalf("after deleting %s: secret kept %v, want %v", s.Name, kept, want)
		}
	}
}

// TestProbeCollectsUnusedSecrets: a probe removes a secret of the controller's naming that
// nothing needs and that is older than the grace; it keeps one stored within the grace, one a
// Sandbox on the node still names, one the agent says is in use, and any not of its naming.
func TestProbeCollectsUnusedSecrets(t *testing.T) {
	sb := &agentsv1.Sandbox{ObjectMeta: objMeta("user"), Spec: agentsv1.SandboxSpec{NodeName: "a",
		Zygo: agentsv1.ZygoSandboxSpec{Secrets: []agentsv1.SecretFile{keyFile}}}}
	e := newEnv(t, secret("s", "k", "v"), sb)
	sr := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(sr, sb)
	e.reconcile(sr, sb)
	a := e.agents["a"]
	old := time.Now().Add(-time.Hour)
	used := NodeSecretName("ns", keyFile)
	leftover := NodeSecretName("gone", agentsv1.SecretFile{Name: "X", SecretKeyRef: agentsv1.SecretKeySelector{Name: "x", Key: "x"}})
	fresh := NodeSecretName("new", agentsv1.SecretFile{Name: "Y", SecretKeyRef: agentsv1.SecretKeySelector{Name: "y", Key: "y"}})
	inUse := NodeSecretName("other", agentsv1.SecretFile{Name: "Z", SecretKeyRef: agentsv1.SecretKeySelector{Name: "z", Key: "z"}})
	for _, n := range []string{leftover, fresh, inUse, "MY_OWN_SECRET"} {
		if err := a.SetSecret(context.Background(), n, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	a.mu.Lock()
	for _, n := range []string{used, leftover, inUse, "MY_OWN_SECRET"} {
		a.secretAt[n] = old
	}
	// A sandbox made outside Kubernetes names inUse: the agent refuses its removal.
	a.sandboxes["sb-outside"] = a.sandboxes[sbID(t, e, sb)]
	rec := a.sandboxes["sb-outside"]
	rec.ID, rec.Options.Secrets = "sb-outside", []string{inUse}
	a.sandboxes["sb-outside"] = rec
	a.mu.Unlock()

	nr := &NodeReconciler{Client: e.c, Dialer: e.agents}
	e.reconcile(nr, readyNode("a"))
	for n, want := range map[string]bool{used: true, leftover: false, fresh: true, inUse: true, "MY_OWN_SECRET": true} {
		if _, kept := a.secrets[n]; kept != want {
			t.Errorf("secret %s kept %v, want %v", n, kept, want)
		}
	}
}

// sbID returns the Zygo sandbox id of sb.
func sbID(t *testing.T, e *env, sb *agentsv1.Sandbox) string {
	t.Helper()
	var got agentsv1.Sandbox
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(sb), &got); err != nil {
		t.Fatal(err)
	}
	return got.Status.Zygo.SandboxID
}
