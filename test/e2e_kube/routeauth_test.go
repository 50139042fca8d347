package e2ekube

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/internal/kube/controller"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// rbacClient returns a client of the test's API server (admin) that knows ServiceAccount
// tokens and RBAC objects.
func (e *env) rbacClient(t *testing.T) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(rbacv1.AddToScheme(s))
	utilruntime.Must(authnv1.AddToScheme(s))
	c, err := client.New(e.cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// installInvokerRole creates ClusterRole zygo-function-invoker from deploy/function-invoker.yaml
// (the manifest users apply), once.
func (e *env) installInvokerRole(t *testing.T, c client.Client) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "deploy", "function-invoker.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(b, &role); err != nil {
		t.Fatalf("deploy/function-invoker.yaml: %v", err)
	}
	if err := c.Create(context.Background(), &role); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating ClusterRole %s: %v", role.Name, err)
	}
}

// serviceAccountToken makes ServiceAccount ns/name (if missing) and returns a token of it from
// the API server's TokenRequest API for audience zygo-route, as `kubectl create token NAME
// --audience zygo-route` does. When bindIn is not
// empty, the account is bound to ClusterRole zygo-function-invoker in namespace bindIn.
func (e *env) serviceAccountToken(t *testing.T, c client.Client, ns, name, bindIn string) string {
	t.Helper()
	ctx := context.Background()
	for _, n := range []string{ns, bindIn} {
		if n != "" {
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if bindIn != "" {
		e.installInvokerRole(t, c)
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: bindIn, Name: "invoke-" + ns + "-" + name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "zygo-function-invoker"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}}
		if err := c.Create(ctx, rb); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	return tokenOf(t, c, sa, routeAudience)
}

// tokenOf returns a token of sa for audience (the API server's own when ""), from the
// TokenRequest API as `kubectl create token [--audience A]` does.
func tokenOf(t *testing.T, c client.Client, sa *corev1.ServiceAccount, audience string) string {
	t.Helper()
	ctx := context.Background()
	exp := int64(3600)
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp}}
	if audience != "" {
		tr.Spec.Audiences = []string{audience}
	}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatalf("requesting a token of ServiceAccount %s/%s: %v", sa.Namespace, sa.Name, err)
	}
	if tr.Status.Token == "" {
		t.Fatalf("TokenRequest for %s/%s answered no token", sa.Namespace, sa.Name)
	}
	return tr.Status.Token
}

// invokeAs posts body to the route's path with token (none when ""), returning the status, the
// node header and the body.
func (e *env) invokeAs(t *testing.T, path, token, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.route+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(controller.NodeHeader), string(bytes.TrimSpace(b))
}

// invokerToken returns a token of ServiceAccount default/e2e-invoker, bound to
// zygo-function-invoker in namespace ns.
func (e *env) invokerToken(t *testing.T, ns string) string {
	t.Helper()
	return e.serviceAccountToken(t, e.rbacClient(t), "default", "e2e-invoker", ns)
}

// testRouteAuth: the route checks callers against the real API server. No token is 401; a
// forged one 401; a ServiceAccount without the role 403; one bound to zygo-function-invoker in
// the Function's namespace gets the Function's answer; the role bound in another namespace
// does not help (403), nor does an account of another namespace bound there.
func (e *env) testRouteAuth(t *testing.T) {
	bg := context.Background()
	rc := e.rbacClient(t)
	e.mustCreate(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "authfn-code"},
		Data: map[string]string{"main.py": "def handler(event, context):\n    return {\"echo\": event.get(\"v\")}\n"}})
	fn := &zygov1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "authfn"},
		Spec: zygov1.FunctionSpec{Runtime: "python", Handler: "main:handler", Replicas: 1,
			Source: zygov1.FunctionSource{ConfigMap: &zygov1.ConfigMapSource{Name: "authfn-code"}}, Limits: zygov1.FunctionLimits{TimeoutMs: 10000}}}
	e.mustCreate(t, fn)
	waitFor(t, 3*time.Minute, "Function authfn Ready", func() (bool, string) {
		if err := e.get(fn); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(fn.Status.Conditions, zygov1.ConditionReady), condStr(fn.Status.Conditions, zygov1.ConditionReady)
	})
	path := controller.RoutePath("default", "authfn")

	nobody := e.serviceAccountToken(t, rc, "default", "nobody", "")
	misbound := e.serviceAccountToken(t, rc, "default", "misbound", "elsewhere")   // bound in another namespace
	outsider := e.serviceAccountToken(t, rc, "elsewhere", "outsider", "elsewhere") // of another namespace, bound there
	invoker := e.serviceAccountToken(t, rc, "default", "caller", "default")
	// The same bound account's token for the API server's own audience: the route wants
	// zygo-route (--route-audience), so it is refused as not valid for it.
	apiAudience := tokenOf(t, rc, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "caller"}}, "")
	// RBAC's authorizer sees a new RoleBinding through its informer: wait for the grant.
	waitFor(t, 30*time.Second, "default/caller allowed", func() (bool, string) {
		st, _, body := e.invokeAs(t, path, invoker, `{"v":"hi"}`)
		return st == http.StatusOK, fmt.Sprintf("%d %s", st, body)
	})
	for _, c := range []struct {
		who, token string
		status     int
		want       string
	}{
		{"no token", "", http.StatusUnauthorized, "no bearer token"},
		{"a forged token", "eyJhbGciOiJSUzI1NiJ9.e30.c2ln", http.StatusUnauthorized, "not valid"},
		{"a token for the API server's audience", apiAudience, http.StatusUnauthorized, "not valid"},
		{"a ServiceAccount without the role", nobody, http.StatusForbidden, `user "system:serviceaccount:default:nobody" may not create functions/invoke (group zygo.run) of Function default/authfn`},
		{"the role bound in another namespace", misbound, http.StatusForbidden, `user "system:serviceaccount:default:misbound" may not`},
		{"an account of another namespace", outsider, http.StatusForbidden, `user "system:serviceaccount:elsewhere:outsider" may not`},
		{"a ServiceAccount bound to zygo-function-invoker", invoker, http.StatusOK, `"echo": "hi"`},
	} {
		st, node, body := e.invokeAs(t, path, c.token, `{"v":"hi"}`)
		var eb wire.ErrorBody
		if st != http.StatusOK && (json.Unmarshal([]byte(body), &eb) != nil || eb.Message == "") {
			t.Errorf("%s: %d with body %s, want an error body", c.who, st, body)
		}
		if got := eb.Message + body; st != c.status || !strings.Contains(got, c.want) {
			t.Errorf("%s: %d %s, want %d with %q", c.who, st, body, c.status, c.want)
		}
		if c.status != http.StatusOK && (node != "" || strings.Contains(body, "echo")) {
			t.Errorf("%s: refused, yet a node (%q) answered: %s", c.who, node, body)
		}
		if c.status == http.StatusForbidden && eb.Code != wire.CodePermissionDenied {
			t.Errorf("%s: body %s, want code %s", c.who, body, wire.CodePermissionDenied)
		}
	}
	// An unknown Function is 404 only to a caller allowed to invoke it.
	if st, _, body := e.invokeAs(t, controller.RoutePath("default", "missing"), invoker, "{}"); st != http.StatusNotFound {
		t.Errorf("an allowed caller of a missing Function: %d %s, want 404", st, body)
	}
	if st, _, body := e.invokeAs(t, controller.RoutePath("default", "missing"), "", "{}"); st != http.StatusUnauthorized {
		t.Errorf("an anonymous caller of a missing Function: %d %s, want 401", st, body)
	}

	if err := e.c.Delete(bg, fn); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "Function authfn gone", func() (bool, string) {
		err := e.get(fn)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}
