package e2ekube

// Regressions of attack-k (a hostile tenant against the controller), against the real API
// server and two real nodes: a tenant's Function never reads another namespace's secret
// through a shared node secret name, and a Function's source may not reach internal addresses
// nor reflect what they answer into its status.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/internal/kube/controller"
)

// internalService listens on ip (a loopback address) and answers every request 403 with body,
// standing in for a service only the cluster reaches (a metadata endpoint, an admin API).
func internalService(t *testing.T, ip, body string) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, body)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String(), &hits
}

// testTenantSources: a Function whose OCI or URL source is an internal service on 127.0.0.1
// (allowed in this controller: --source-allow-cidr 127.0.0.1/32) gets the status line in its
// condition, never the service's body (attack-k read a secret from it); one on 127.0.0.2
// (loopback, not allowed) is refused at dial time naming the field and the address, and the
// service never sees a request.
func (e *env) testTenantSources(t *testing.T) {
	bg := context.Background()
	e.mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-src"}})
	const secret = "INTERNAL-ONLY-aws-secret-access-key=AKIA1234SECRET"
	allowed, _ := internalService(t, "127.0.0.1", secret)
	refused, refusedHits := internalService(t, "127.0.0.2", secret)
	fn := func(name string, src zygov1.FunctionSource) *zygov1.Function {
		return &zygov1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-src", Name: name},
			Spec: zygov1.FunctionSpec{Runtime: "python", Handler: "main:handler", Replicas: 1, Source: src}}
	}
	zero := strings.Repeat("0", 64)
	for _, c := range []struct {
		fn   *zygov1.Function
		says string
	}{
		{fn("body-oci", zygov1.FunctionSource{OCI: &zygov1.OCISource{Reference: allowed + "/latest/meta-data:iam"}}), "403 Forbidden"},
		{fn("body-url", zygov1.FunctionSource{URL: &zygov1.URLSource{URL: "http://" + allowed + "/latest/meta-data/iam", SHA256: zero}}), "403 Forbidden"},
		{fn("loopback-oci", zygov1.FunctionSource{OCI: &zygov1.OCISource{Reference: refused + "/x:v1"}}), "spec.source.oci.reference: fetching the manifest of " + refused + "/x:v1: address 127.0.0.2 is refused (loopback)"},
		{fn("loopback-url", zygov1.FunctionSource{URL: &zygov1.URLSource{URL: "http://" + refused + "/x.tgz", SHA256: zero}}), "address 127.0.0.2 is refused (loopback)"},
		{fn("metadata-url", zygov1.FunctionSource{URL: &zygov1.URLSource{URL: "http://169.254.169.254/latest/meta-data/", SHA256: zero}}), "address 169.254.169.254 is refused (link-local"},
	} {
		e.mustCreate(t, c.fn)
		var msg string
		waitFor(t, 60*time.Second, c.fn.Name+" refused", func() (bool, string) {
			_ = e.get(c.fn)
			cond := meta.FindStatusCondition(c.fn.Status.Conditions, zygov1.ConditionReady)
			msg = condStr(c.fn.Status.Conditions, zygov1.ConditionReady)
			return cond != nil && cond.Reason == zygov1.ReasonSourceFailed && strings.Contains(cond.Message, "spec.source"), msg
		})
		t.Logf("%s: %s", c.fn.Name, msg)
		if !strings.Contains(msg, c.says) {
			t.Errorf("Function %s: %s, want it to say %q", c.fn.Name, msg, c.says)
		}
		if strings.Contains(msg, "AKIA") {
			t.Errorf("Function %s's status carries the internal service's response body: %s", c.fn.Name, msg)
		}
		if err := e.c.Delete(bg, c.fn); err != nil {
			t.Fatal(err)
		}
	}
	if n := refusedHits.Load(); n != 0 {
		t.Errorf("the service on 127.0.0.2 (not allowed) was reached %d times", n)
	}
}

// Secret names of attack-k's birthday search: with 32 bits of hash, tenant-a/x-20860/password
// and victim/creds-130640/password were both the node secret k8sfed261b9_db.
const (
	collVictimSecret = "creds-130640"
	collTenantSecret = "x-20860"
)

// testTenantSecretNames: tenant-a's Function and victim's Sandbox on the same node, each with
// a SecretFile "db" whose sources collided under the old 32-bit names, each read their own
// value: the victim's Sandbox being made does not put its password where the tenant's
// Function reads. On the old code the tenant's Function read VICTIM-DB-PASSWORD.
func (e *env) testTenantSecretNames(t *testing.T) {
	bg := context.Background()
	for _, ns := range []string{"tenant-a", "victim"} {
		if err := e.c.Create(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	tf := agentsv1.SecretFile{Name: "db", SecretKeyRef: agentsv1.SecretKeySelector{Name: collTenantSecret, Key: "password"}}
	vf := agentsv1.SecretFile{Name: "db", SecretKeyRef: agentsv1.SecretKeySelector{Name: collVictimSecret, Key: "password"}}
	tn, vn := controller.NodeSecretName("tenant-a", tf), controller.NodeSecretName("victim", vf)
	if tn == vn {
		t.Fatalf("tenant-a's and victim's SecretFiles share the node secret %s", tn)
	}
	e.mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: collTenantSecret}, Data: map[string][]byte{"password": []byte("tenant-value")}})
	e.mustCreate(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "steal-code"},
		Data: map[string]string{"main.py": "def handler(event, context):\n    with open(" + fmt.Sprintf("%q", "/run/secrets/"+tn) + ") as f:\n        return {\"got\": f.read()}\n"}})
	fn := &zygov1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "steal"},
		Spec: zygov1.FunctionSpec{Runtime: "python", Handler: "main:handler", Replicas: 1,
			Source: zygov1.FunctionSource{ConfigMap: &zygov1.ConfigMapSource{Name: "steal-code"}}, Limits: zygov1.FunctionLimits{TimeoutMs: 10000},
			Secrets: []agentsv1.SecretFile{tf}}}
	e.mustCreate(t, fn)
	waitFor(t, 3*time.Minute, "Function steal Ready", func() (bool, string) {
		if err := e.get(fn); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(fn.Status.Conditions, zygov1.ConditionReady), condStr(fn.Status.Conditions, zygov1.ConditionReady)
	})
	nodeName := fn.Status.Nodes[0].Name
	tok := e.serviceAccountToken(t, e.rbacClient(t), "tenant-a", "thief", "tenant-a")
	invoke := func() string {
		var b string
		waitFor(t, 30*time.Second, "invoke steal", func() (bool, string) {
			var st int
			st, _, b = e.invokeAs(t, fn.Status.Route, tok, "{}")
			return st == http.StatusOK, fmt.Sprintf("%d %s", st, b)
		})
		return b
	}
	if got := invoke(); !strings.Contains(got, "tenant-value") {
		t.Fatalf("the tenant's Function reads %s, want its own tenant-value", got)
	}
	e.mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "victim", Name: collVictimSecret}, Data: map[string][]byte{"password": []byte("VICTIM-DB-PASSWORD")}})
	vsb := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "victim", Name: "db-user"},
		Spec: agentsv1.SandboxSpec{NodeName: nodeName, Zygo: agentsv1.ZygoSandboxSpec{Secrets: []agentsv1.SecretFile{vf}}}}
	e.mustCreate(t, vsb)
	waitFor(t, 2*time.Minute, "victim's Sandbox Ready", func() (bool, string) {
		if err := e.get(vsb); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(vsb.Status.Conditions, agentsv1.ConditionReady), condStr(vsb.Status.Conditions, agentsv1.ConditionReady)
	})
	if got := invoke(); strings.Contains(got, "VICTIM") || !strings.Contains(got, "tenant-value") {
		t.Errorf("after victim's Sandbox on %s, tenant-a's Function reads %s, want tenant-value", nodeName, got)
	}
	for _, o := range []client.Object{vsb, fn} {
		_ = e.c.Delete(bg, o)
	}
	waitFor(t, 90*time.Second, "victim's Sandbox and steal gone", func() (bool, string) {
		e1, e2 := e.get(vsb), e.get(fn)
		return apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2), fmt.Sprint(e1, e2)
	})
}
