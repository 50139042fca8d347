package e2ekube

// A hostile tenant's attacks on the controller (round attack-k), as regression tests: a
// forged status.zygo.sandboxID, a SandboxFork deleting Sandboxes it does not control, and
// object names longer than a label value.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/internal/kube/controller"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// testTenantAttacks runs the parts in namespaces of their own.
func (e *env) testTenantAttacks(t *testing.T) {
	for _, ns := range []string{"t2-tenant", "t2-victim"} {
		e.mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	t.Run("ForkDeleteSparesUncontrolled", e.testForkDeleteSparesUncontrolled)
	t.Run("LongNames", e.testLongNames)
	t.Run("ForgedStatusSandboxID", e.testForgedStatus)
}

// testForkDeleteSparesUncontrolled: deleting a SandboxFork deletes only the Sandboxes it
// controls, not one that merely carries its label (the old code listed by label alone and
// deleted the bystander).
func (e *env) testForkDeleteSparesUncontrolled(t *testing.T) {
	bg := context.Background()
	by := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "t2-tenant", Name: "bystander",
		Labels: map[string]string{controller.LabelFork: "f"}}, Spec: agentsv1.SandboxSpec{NodeName: "no-such-node"}}
	e.mustCreate(t, by)
	f := &zygov1.SandboxFork{ObjectMeta: metav1.ObjectMeta{Namespace: "t2-tenant", Name: "f"},
		Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: "no-such-source"}, Count: 1}}
	e.mustCreate(t, f)
	waitFor(t, 30*time.Second, "fork f has its finalizer", func() (bool, string) {
		_ = e.get(f)
		return len(f.Finalizers) > 0, fmt.Sprint(f.Finalizers)
	})
	if err := e.c.Delete(bg, f); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "fork f gone", func() (bool, string) {
		err := e.get(f)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	time.Sleep(2 * time.Second)
	if err := e.get(by); apierrors.IsNotFound(err) || (err == nil && by.DeletionTimestamp != nil) {
		t.Errorf("deleting SandboxFork f deleted Sandbox bystander, which it never controlled (only labelled %s=f)", controller.LabelFork)
	}
	_ = e.c.Delete(bg, by)
	waitFor(t, time.Minute, "bystander gone", func() (bool, string) {
		err := e.get(by)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// testLongNames: a Sandbox whose name is longer than a label value (63) gets its access
// Secret (the old code put the name in a label: AccessSecretFailed forever), and so does a
// copy of a SandboxFork whose name is as long.
func (e *env) testLongNames(t *testing.T) {
	bg := context.Background()
	name := "long-" + strings.Repeat("x", 70)
	sb := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "t2-tenant", Name: name}, Spec: agentsv1.SandboxSpec{NodeName: "node-a"}}
	e.mustCreate(t, sb)
	e.waitReady(t, sb, 2*time.Minute)
	if sb.Status.Zygo.AccessSecretName != controller.AccessSecretName(name) {
		t.Errorf("a Sandbox with a %d-character name: accessSecretName %q", len(name), sb.Status.Zygo.AccessSecretName)
	}
	f := &zygov1.SandboxFork{ObjectMeta: metav1.ObjectMeta{Namespace: "t2-tenant", Name: "fork-" + strings.Repeat("y", 70)},
		Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: name}, Count: 1}}
	e.mustCreate(t, f)
	waitFor(t, 2*time.Minute, "long-named fork's copy Ready", func() (bool, string) {
		kid := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "t2-tenant", Name: f.Name + "-0"}}
		if err := e.get(kid); err != nil {
			_ = e.get(f)
			return false, err.Error() + "; fork: " + condStr(f.Status.Conditions, zygov1.ConditionComplete)
		}
		return meta.IsStatusConditionTrue(kid.Status.Conditions, agentsv1.ConditionReady), condStr(kid.Status.Conditions, agentsv1.ConditionReady)
	})
	if err := e.c.Delete(bg, f); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "long-named fork and its copy gone", func() (bool, string) {
		e1 := e.get(f)
		e2 := e.get(&agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "t2-tenant", Name: f.Name + "-0"}})
		return apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2), fmt.Sprint(e1, e2)
	})
	if err := e.c.Delete(bg, sb); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "long-named Sandbox gone", func() (bool, string) {
		err := e.get(sb)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// waitReady waits for sb to be Ready.
func (e *env) waitReady(t *testing.T, sb *agentsv1.Sandbox, limit time.Duration) {
	t.Helper()
	waitFor(t, limit, sb.Namespace+"/"+sb.Name+" Ready", func() (bool, string) {
		if err := e.get(sb); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(sb.Status.Conditions, agentsv1.ConditionReady), condStr(sb.Status.Conditions, agentsv1.ConditionReady)
	})
}

// testForgedStatus: a tenant whose Role grants resources ["*"] (which RBAC matches to
// sandboxes/status too) writes another namespace's sandbox id into its own Sandbox's status.
// The controller mints nothing for it (Ready=False SandboxNotOwned), and deleting the
// tenant's Sandbox leaves the victim's sandbox on its node. The old code minted the victim's
// access token into the tenant's Secret and removed the victim's sandbox.
func (e *env) testForgedStatus(t *testing.T) {
	bg := context.Background()
	rc := e.rbacClient(t)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "t2-tenant", Name: "tenant-all"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"agents.x-k8s.io", "extensions.agents.x-k8s.io", "zygo.run"}, Resources: []string{"*"}, Verbs: []string{"*"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}}
	if err := rc.Create(bg, role); err != nil {
		t.Fatal(err)
	}
	if err := rc.Create(bg, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "t2-tenant", Name: "mallory"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant-all"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}}}); err != nil {
		t.Fatal(err)
	}
	mcfg := rest.CopyConfig(e.cfg)
	mcfg.Impersonate = rest.ImpersonationConfig{UserName: "mallory"}
	mc, err := client.New(mcfg, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	victim := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "t2-victim", Name: "crown-jewels"}, Spec: agentsv1.SandboxSpec{NodeName: "node-a"}}
	e.mustCreate(t, victim)
	e.waitReady(t, victim, 2*time.Minute)
	vid := victim.Status.Zygo.SandboxID

	thief := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "t2-tenant", Name: "thief"}, Spec: agentsv1.SandboxSpec{NodeName: "node-a"}}
	if err := mc.Create(bg, thief); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, thief, 2*time.Minute)
	own := thief.Status.Zygo.SandboxID
	waitFor(t, 30*time.Second, "mallory's status patch", func() (bool, string) {
		if err := mc.Get(bg, client.ObjectKeyFromObject(thief), thief); err != nil {
			return false, err.Error()
		}
		before := thief.DeepCopy()
		thief.Status.Zygo.SandboxID = vid
		err := mc.Status().Patch(bg, thief, client.MergeFrom(before))
		return err == nil, fmt.Sprint(err)
	})
	waitFor(t, 40*time.Second, "thief Ready=False SandboxNotOwned", func() (bool, string) {
		if err := e.get(thief); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(thief.Status.Conditions, agentsv1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == agentsv1.ReasonSandboxNotOwned, condStr(thief.Status.Conditions, agentsv1.ConditionReady)
	})
	time.Sleep(3 * time.Second) // a pass that would mint has had its chance
	var sec corev1.Secret
	if err := e.c.Get(bg, client.ObjectKey{Namespace: "t2-tenant", Name: controller.AccessSecretName("thief")}, &sec); err == nil {
		if got := string(sec.Data["sandboxID"]); got == vid {
			c := zygo.NewTCPClient(string(sec.Data["address"]), string(sec.Data["token"]))
			var out strings.Builder
			_, err := c.Exec(bg, vid, execBody("true"), &out, io.Discard)
			t.Errorf("the forger's access Secret names the victim's sandbox %s (exec with it: %v)", vid, err)
		}
	}
	if err := mc.Delete(bg, thief); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "thief gone", func() (bool, string) {
		err := e.get(thief)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	n := e.nodes["node-a"]
	a := zygo.NewTCPClient(n.addr, n.token)
	if _, err := a.GetSandbox(bg, vid); err != nil {
		t.Errorf("deleting t2-tenant/thief: the victim's sandbox %s on node-a: %v, want it kept", vid, err)
	}
	if _, err := a.GetSandbox(bg, own); !zygo.IsNotFound(err) {
		t.Errorf("deleting t2-tenant/thief: its own sandbox %s: %v, want it removed", own, err)
	}
	e.shippedTenantRoleNoStatus(t, rc)
	_ = e.c.Delete(bg, victim)
	waitFor(t, time.Minute, "victim gone", func() (bool, string) {
		err := e.get(victim)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// shippedTenantRoleNoStatus: a user bound to deploy/tenant-rbac.yaml's zygo-tenant-edit may
// create Sandboxes and SandboxForks but write no status of them.
func (e *env) shippedTenantRoleNoStatus(t *testing.T, rc client.Client) {
	bg := context.Background()
	b, err := os.ReadFile(filepath.Join(repo, "deploy", "tenant-rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for i, doc := range bytes.Split(b, []byte("\n---\n")) {
		var cr rbacv1.ClusterRole
		if err := yaml.Unmarshal(doc, &cr); err != nil {
			t.Fatalf("deploy/tenant-rbac.yaml document %d: %v", i, err)
		}
		for _, r := range cr.Rules {
			for _, res := range r.Resources {
				if res == "*" || (strings.HasSuffix(res, "/status") && !onlyReads(r.Verbs)) {
					t.Errorf("ClusterRole %s grants %v on %s", cr.Name, r.Verbs, res)
				}
			}
		}
		if err := rc.Create(bg, &cr); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if err := rc.Create(bg, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "t2-tenant", Name: "alice"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "zygo-tenant-edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}); err != nil {
		t.Fatal(err)
	}
	acfg := rest.CopyConfig(e.cfg)
	acfg.Impersonate = rest.ImpersonationConfig{UserName: "alice"}
	ac, err := client.New(acfg, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	sb := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "t2-tenant", Name: "alices"}, Spec: agentsv1.SandboxSpec{NodeName: "no-such-node"}}
	waitFor(t, 30*time.Second, "alice creates a Sandbox", func() (bool, string) {
		err := ac.Create(bg, sb)
		return err == nil, fmt.Sprint(err)
	})
	before := sb.DeepCopy()
	sb.Status.Zygo.SandboxID = "sb-0000000000000000"
	if err := ac.Status().Patch(bg, sb, client.MergeFrom(before)); !apierrors.IsForbidden(err) {
		t.Errorf("alice (zygo-tenant-edit) patching a Sandbox's status: %v, want forbidden", err)
	}
	f := &zygov1.SandboxFork{ObjectMeta: metav1.ObjectMeta{Namespace: "t2-tenant", Name: "alicef"},
		Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: "alices"}, Count: 1}}
	if err := ac.Create(bg, f); err != nil {
		t.Fatalf("alice (zygo-tenant-edit) creating a SandboxFork: %v", err)
	}
	fb := f.DeepCopy()
	f.Status.NodeName = "node-a"
	if err := ac.Status().Patch(bg, f, client.MergeFrom(fb)); !apierrors.IsForbidden(err) {
		t.Errorf("alice (zygo-tenant-edit) patching a SandboxFork's status: %v, want forbidden", err)
	}
	// zygo-tenant-edit may invoke the namespace's Functions, so its holder may grant that too:
	// given rolebindings create (as a namespace admin has), alice binds zygo-function-invoker
	// in her namespace; RBAC's escalation check refuses that to whoever lacks functions/invoke.
	if err := rc.Create(bg, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "t2-tenant", Name: "bind-roles"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"rolebindings"}, Verbs: []string{"create", "delete"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := rc.Create(bg, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "t2-tenant", Name: "alice-binds"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "bind-roles"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}); err != nil {
		t.Fatal(err)
	}
	grant := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "t2-tenant", Name: "invokers"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "zygo-function-invoker"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "t2-tenant", Name: "caller"}}}
	arc, err := client.New(acfg, client.Options{Scheme: rc.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "alice (zygo-tenant-edit) binds zygo-function-invoker in her namespace", func() (bool, string) {
		err := arc.Create(bg, grant)
		return err == nil, fmt.Sprint(err)
	})
	_ = arc.Delete(bg, grant)
	for _, o := range []client.Object{f, sb} {
		_ = ac.Delete(bg, o)
	}
}

func onlyReads(verbs []string) bool {
	for _, v := range verbs {
		if v != "get" && v != "list" && v != "watch" {
			return false
		}
	}
	return true
}
