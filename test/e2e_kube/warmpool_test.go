package e2ekube

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	extv1 "github.com/zygo-run/zygo/internal/kube/api/extensions/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// testWarmPoolForeignCheckpoint: namespace tenant makes its warm pool's source itself (owned by
// the pool, on node-a) annotated zygo.run/warm-checkpoint with default/wvictim's image. The
// pool checkpoints its own source instead; a claim from it runs and holds nothing of the
// victim's; deleting the pool leaves the victim's image on the node (KUBE-FINDINGS: a tenant
// pointing its pool at another namespace's checkpoint). Runs on node-a only (node-b is
// stopped by testFunction).
func (e *env) testWarmPoolForeignCheckpoint(t *testing.T) {
	bg := context.Background()
	n := e.nodes["node-a"]
	a := zygo.NewTCPClient(n.addr, n.token)
	waitReady := func(sb *agentsv1.Sandbox) {
		t.Helper()
		waitFor(t, 2*time.Minute, "Sandbox "+sb.Namespace+"/"+sb.Name+" Ready", func() (bool, string) {
			if err := e.get(sb); err != nil {
				return false, err.Error()
			}
			return meta.IsStatusConditionTrue(sb.Status.Conditions, agentsv1.ConditionReady), condStr(sb.Status.Conditions, agentsv1.ConditionReady)
		})
	}
	exec := func(id string, script string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		st, err := a.Exec(bg, id, execBody("sh", "-c", script), &out, &errOut)
		if err != nil || st.Code != 0 {
			t.Fatalf("exec %q in %s: %v, %+v, %s", script, id, err, st, errOut.String())
		}
		return strings.TrimSpace(out.String())
	}

	// The victim: a sandbox holding a mark, and an image of it.
	victim := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "wvictim"}, Spec: agentsv1.SandboxSpec{NodeName: "node-a"}}
	e.mustCreate(t, victim)
	waitReady(victim)
	exec(victim.Status.Zygo.SandboxID, "echo victim-data > /tmp/mark")
	vck := &zygov1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "wvictim-ck"}, Spec: zygov1.CheckpointSpec{SandboxRef: zygov1.LocalRef{Name: "wvictim"}}}
	e.mustCreate(t, vck)
	waitFor(t, 2*time.Minute, "victim's image taken", func() (bool, string) {
		_ = e.get(vck)
		return vck.Status.CheckpointID != "", condStr(vck.Status.Conditions, zygov1.ConditionReady)
	})
	victimImage := vck.Status.CheckpointID

	// The tenant: a pool whose template does not exist yet (so the pool makes no source of its
	// own), a source the tenant makes itself pointing at the victim's image, then the template.
	e.mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}})
	pool := &extv1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "p"},
		Spec: extv1.SandboxWarmPoolSpec{Replicas: 1, TemplateRef: extv1.SandboxTemplateRef{Name: "t"}}}
	e.mustCreate(t, pool)
	if err := e.get(pool); err != nil {
		t.Fatal(err)
	}
	yes := true
	src := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "p-warm-0",
		Labels:          map[string]string{extv1.LabelWarmPool: "p"},
		Annotations:     map[string]string{"zygo.run/warm-checkpoint": victimImage},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: extv1.GroupVersion.String(), Kind: "SandboxWarmPool", Name: "p", UID: pool.UID, Controller: &yes}}},
		Spec: agentsv1.SandboxSpec{NodeName: "node-a"}}
	e.mustCreate(t, src)
	e.mustCreate(t, &extv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "t"}})
	waitReady(src)
	waitFor(t, 2*time.Minute, "pool p ready", func() (bool, string) {
		if err := e.get(pool); err != nil {
			return false, err.Error()
		}
		return pool.Status.ReadyReplicas == 1, condStr(pool.Status.Conditions, agentsv1.ConditionReady)
	})

	cl := &extv1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "c"},
		Spec: extv1.SandboxClaimSpec{TemplateRef: extv1.SandboxTemplateRef{Name: "t"}}}
	e.mustCreate(t, cl)
	waitFor(t, 2*time.Minute, "claim tenant/c Ready", func() (bool, string) {
		if err := e.get(cl); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(cl.Status.Conditions, agentsv1.ConditionReady), condStr(cl.Status.Conditions, agentsv1.ConditionReady)
	})
	got := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "c"}}
	if err := e.get(got); err != nil {
		t.Fatal(err)
	}
	if cl.Status.SandboxStatus.LaunchType != "warm" || got.Status.Zygo.CheckpointID == victimImage || got.Status.Zygo.ParentID == victim.Status.Zygo.SandboxID {
		t.Fatalf("claim's sandbox %+v (launch %s): want a warm copy of the tenant's own source, not of image %s", got.Status.Zygo, cl.Status.SandboxStatus.LaunchType, victimImage)
	}
	// The claim's copy is named for its Sandbox's UID, as a created sandbox is.
	if rec, err := a.GetSandbox(bg, "k8s-"+string(got.UID)); err != nil || rec.ID != got.Status.Zygo.SandboxID || rec.ParentID == "" {
		t.Fatalf("the claim's copy by its name k8s-%s: %+v, %v; want copy %s", got.UID, rec, err, got.Status.Zygo.SandboxID)
	}
	if mark := exec(got.Status.Zygo.SandboxID, "cat /tmp/mark 2>/dev/null || echo none"); mark != "none" {
		t.Fatalf("the tenant's claim reads /tmp/mark = %q: it holds the victim's files", mark)
	}

	// Deleting the claim and then the pool removes the tenant's sandboxes and its own image,
	// never the victim's.
	for _, o := range []client.Object{cl, pool} {
		if err := e.c.Delete(bg, o); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Minute, o.GetName()+" and its sandboxes gone", func() (bool, string) {
			e1, e2, e3 := e.get(o), e.get(got), e.get(src)
			done := apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2)
			if o == client.Object(pool) {
				done = done && apierrors.IsNotFound(e3)
			}
			return done, fmt.Sprint(e1, e2, e3)
		})
	}
	if _, err := a.GetCheckpoint(bg, victimImage); err != nil {
		t.Fatalf("the victim's image %s after the tenant's pool went: %v", victimImage, err)
	}
	var out bytes.Buffer
	if _, err := a.Exec(bg, victim.Status.Zygo.SandboxID, execBody("cat", "/tmp/mark"), &out, io.Discard); err != nil || strings.TrimSpace(out.String()) != "victim-data" {
		t.Fatalf("the victim after the tenant's pool went: %v, %q", err, out.String())
	}
	for _, o := range []client.Object{vck, victim} {
		if err := e.c.Delete(bg, o); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 90*time.Second, "the victim and its image gone", func() (bool, string) {
		e1, e2 := e.get(vck), e.get(victim)
		return apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2), fmt.Sprint(e1, e2)
	})
}
