package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	extv1 "github.com/zygo-run/zygo/internal/kube/api/extensions/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
)

// A Ready Sandbox gets its access Secret in its own namespace: the agent's token for that
// sandbox (never the node's), the agent's address and the sandbox id, with the agent's CA
// when it serves TLS; owned by the Sandbox, named in its status, deleted with it.
func TestSandboxAccessSecret(t *testing.T) {
	sb := &agentsv1.Sandbox{ObjectMeta: objMeta("sb"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	ca := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "zygo-system", Name: "ca"}, Data: map[string][]byte{"ca.crt": []byte("PEM")}}
	e := newEnv(t, sb, ca)
	node := &zygov1.ZygoNode{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	e.get(node)
	node.Spec.TLS = &zygov1.AgentTLS{CASecretRef: zygov1.SecretRef{Name: "ca"}, ServerName: "zygo-node"}
	if err := e.c.Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	r := &SandboxReconciler{Client: e.c, Dialer: e.agents, Namespace: "zygo-system"}
	e.reconcile(r, sb)
	e.get(sb)
	if c := condition(t, sb.Status.Conditions, agentsv1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Fatalf("Ready = %+v", c)
	}
	if sb.Status.Zygo.AccessSecretName != "sb-zygo-access" {
		t.Fatalf("status.zygo.accessSecretName = %q", sb.Status.Zygo.AccessSecretName)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sb-zygo-access"}}
	e.get(s)
	id := sb.Status.Zygo.SandboxID
	want := map[string]string{AccessKeyToken: "zygo_sbx_" + id + "_a", AccessKeyAddress: "127.0.0.1:1", AccessKeySandboxID: id,
		AccessKeyCA: "PEM", AccessKeyServerName: "zygo-node"}
	if len(s.Data) != len(want) {
		t.Errorf("Secret keys %v, want %v", s.Data, want)
	}
	for k, v := range want {
		if string(s.Data[k]) != v {
			t.Errorf("Secret key %s = %q, want %q", k, s.Data[k], v)
		}
	}
	if s.Type != AccessSecretType || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != sb.UID || s.Labels[LabelAccessFor] != "sb" {
		t.Errorf("Secret %+v: want type %s owned by the Sandbox", s.ObjectMeta, AccessSecretType)
	}
	// Reconciled again: unchanged.
	rv := s.ResourceVersion
	e.reconcile(r, sb)
	e.get(s)
	if s.ResourceVersion != rv {
		t.Errorf("the Secret was rewritten by a reconcile that changed nothing")
	}
	// Deleted: the sandbox leaves its node, the Secret goes with it.
	if err := e.c.Delete(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	e.reconcile(r, sb)
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(s), s); !apierrors.IsNotFound(err) {
		t.Fatalf("the access Secret after the Sandbox's delete: %v", err)
	}
}

// A Secret of the name that is not the Sandbox's is left alone, and the Sandbox says so; an
// agent that mints no token makes the Sandbox not Ready, saying why; a warm pool's source
// gets no Secret.
func TestSandboxAccessSecretRefusals(t *testing.T) {
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sb-zygo-access"}, Data: map[string][]byte{"mine": []byte("x")}}
	sb := &agentsv1.Sandbox{ObjectMeta: objMeta("sb"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	other := &agentsv1.Sandbox{ObjectMeta: objMeta("other"), Spec: agentsv1.SandboxSpec{NodeName: "b"}}
	yes := true
	src := &agentsv1.Sandbox{ObjectMeta: objMeta("src"), Spec: agentsv1.SandboxSpec{NodeName: "a"}}
	src.OwnerReferences = []metav1.OwnerReference{{APIVersion: "extensions.agents.x-k8s.io/v1beta1", Kind: "SandboxWarmPool", Name: "p", UID: "uid-p", Controller: &yes}}
	e := newEnv(t, foreign, sb, other, src)
	e.agents["b"].mintErr = errors.New("no route POST /v1/sandboxes/x/access-token")
	r := &SandboxReconciler{Client: e.c, Dialer: e.agents}
	for _, o := range []*agentsv1.Sandbox{sb, other, src} {
		e.reconcile(r, o)
		e.get(o)
	}
	c := condition(t, sb.Status.Conditions, agentsv1.ConditionReady)
	if c.Status != metav1.ConditionFalse || c.Reason != agentsv1.ReasonAccessSecretFailed || !strings.Contains(c.Message, "is not this Sandbox's") {
		t.Errorf("sb beside a foreign Secret: Ready %+v", c)
	}
	e.get(foreign)
	if string(foreign.Data["mine"]) != "x" || len(foreign.Data) != 1 {
		t.Errorf("the foreign Secret was changed: %v", foreign.Data)
	}
	c = condition(t, other.Status.Conditions, agentsv1.ConditionReady)
	if c.Status != metav1.ConditionFalse || c.Reason != agentsv1.ReasonAccessSecretFailed || !strings.Contains(c.Message, "no route") {
		t.Errorf("a sandbox whose agent mints no token: Ready %+v", c)
	}
	if c := condition(t, src.Status.Conditions, agentsv1.ConditionReady); c.Status != metav1.ConditionTrue || src.Status.Zygo.AccessSecretName != "" {
		t.Errorf("warm source: Ready %+v, access Secret %q", c, src.Status.Zygo.AccessSecretName)
	}
	var list corev1.SecretList
	if err := e.c.List(context.Background(), &list, client.HasLabels{LabelAccessFor}); err != nil || len(list.Items) != 0 {
		t.Errorf("access Secrets made: %v %v", list.Items, err)
	}
	if n := AccessSecretName(strings.Repeat("x", 253)); len(n) > 253 || !strings.Contains(n, "-zygo-access-") {
		t.Errorf("AccessSecretName of a 253-character name: %q (%d)", n, len(n))
	}
}

// A hashed access Secret name (Sandbox names of more than 241 characters) is never the plain
// name of another Sandbox: with the old scheme, the 241-character name START-HASH gave
// START-HASH-zygo-access, the very name of the 242-character Sandbox's Secret.
func TestAccessSecretNameUnambiguous(t *testing.T) {
	long := strings.Repeat("a", 242)
	hashed := AccessSecretName(long)
	if len(hashed) != 253 {
		t.Fatalf("AccessSecretName of 242 characters: %d characters, want 253", len(hashed))
	}
	if plain, ok := strings.CutSuffix(hashed, "-zygo-access"); ok && len(plain) <= 241 {
		t.Errorf("AccessSecretName(%d chars) = %q is also AccessSecretName(%q)", len(long), hashed, plain)
	}
	if AccessSecretName(strings.Repeat("a", 243)) == hashed {
		t.Error("two long names share an access Secret name")
	}
	if AccessSecretName("sb") != "sb-zygo-access" {
		t.Errorf("AccessSecretName(sb) = %q", AccessSecretName("sb"))
	}
}

// NameLabel keeps names that fit a label value and hashes longer ones into a valid label
// value no object name can be.
func TestNameLabel(t *testing.T) {
	n63 := strings.Repeat("x", 63)
	if NameLabel(n63) != n63 {
		t.Errorf("NameLabel of a 63-character name changed it: %q", NameLabel(n63))
	}
	a, b := NameLabel(strings.Repeat("x", 64)), NameLabel(strings.Repeat("x", 253))
	for _, v := range []string{a, b} {
		if len(v) > 63 || !strings.HasPrefix(v, "sha256_") || len(validation.IsValidLabelValue(v)) != 0 || len(validation.IsDNS1123Subdomain(v)) == 0 {
			t.Errorf("NameLabel of a long name: %q (label errors %v; must not be an object name)", v, validation.IsValidLabelValue(v))
		}
	}
	if a == b {
		t.Error("two long names share a label value")
	}
}

// A claim served from a warm pool is a copy of the pool's source: it gets an access Secret of
// its own, for its own sandbox; the source gets none.
func TestWarmClaimGetsItsOwnAccessSecret(t *testing.T) {
	tpl := &extv1.SandboxTemplate{ObjectMeta: objMeta("tpl")}
	pool := &extv1.SandboxWarmPool{ObjectMeta: objMeta("pool"), Spec: extv1.SandboxWarmPoolSpec{Replicas: 1, TemplateRef: extv1.SandboxTemplateRef{Name: "tpl"}}}
	e := newEnv(t, tpl, pool)
	pr, sr, cr := &WarmPoolReconciler{Client: e.c, Dialer: e.agents}, &SandboxReconciler{Client: e.c, Dialer: e.agents}, &ClaimReconciler{Client: e.c}
	e.reconcile(pr, pool)
	src := &agentsv1.Sandbox{}
	src.Namespace, src.Name = "ns", sourceName("pool", 0)
	e.get(src)
	e.reconcile(sr, src)
	e.reconcile(pr, pool)
	warm := &extv1.SandboxClaim{ObjectMeta: objMeta("warm"), Spec: extv1.SandboxClaimSpec{TemplateRef: extv1.SandboxTemplateRef{Name: "tpl"}}}
	e.create(warm)
	e.reconcile(cr, warm)
	wsb := &agentsv1.Sandbox{}
	wsb.Namespace, wsb.Name = "ns", "warm"
	e.get(wsb)
	e.reconcile(sr, wsb)
	e.get(wsb)
	e.get(src)
	if wsb.Status.Zygo.ParentID == "" || wsb.Status.Zygo.AccessSecretName != "warm-zygo-access" || src.Status.Zygo.AccessSecretName != "" {
		t.Fatalf("warm claim's Sandbox %+v, source %+v", wsb.Status.Zygo, src.Status.Zygo)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "warm-zygo-access"}}
	e.get(s)
	if id := string(s.Data[AccessKeySandboxID]); id != wsb.Status.Zygo.SandboxID || id == src.Status.Zygo.SandboxID ||
		!strings.HasPrefix(string(s.Data[AccessKeyToken]), "zygo_sbx_"+id+"_") {
		t.Fatalf("the claim's access Secret %v, the copy %s, its source %s", s.Data, wsb.Status.Zygo.SandboxID, src.Status.Zygo.SandboxID)
	}
}
