package e2ekube

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// hungAgent is a node agent that answers its status (so its ZygoNode is Ready) and lookups,
// and never answers a create until release is closed; then it refuses it (503).
type hungAgent struct {
	release chan struct{}
	creates atomic.Int32 // creates received
}

func (h *hungAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/status":
		_ = json.NewEncoder(w).Encode(wire.StatusBody{APIVersion: 1, Version: "hung"})
	case r.Method == http.MethodPost && r.URL.Path == "/v1/sandboxes":
		h.creates.Add(1)
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(wire.ErrorAnswer{Error: wire.ErrorBody{Code: wire.CodeUnavailable, Message: "hung agent released"}})
	default:
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(wire.ErrorAnswer{Error: wire.ErrorBody{Code: wire.CodeNotFound, Message: "not here"}})
	}
}

// testHungNode: five Sandboxes on an agent that never answers a create (more than the four
// reconcile workers) do not stop a Sandbox on node-a from being made within seconds: a create
// holds no worker while it waits. Once the agent answers, the five say why and can be deleted.
func (e *env) testHungNode(t *testing.T) {
	bg := context.Background()
	h := &hungAgent{release: make(chan struct{})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	released := false
	release := func() {
		if !released {
			close(h.release)
			released = true
		}
	}
	t.Cleanup(func() { release(); _ = srv.Close() })

	e.mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sysNS, Name: "hung-token"}, Data: map[string][]byte{"token": []byte("t")}})
	hung := &zygov1.ZygoNode{ObjectMeta: metav1.ObjectMeta{Name: "hung"}, Spec: zygov1.ZygoNodeSpec{Address: l.Addr().String(), TokenSecretRef: zygov1.SecretRef{Name: "hung-token"}}}
	e.mustCreate(t, hung)
	waitFor(t, 30*time.Second, "ZygoNode hung Ready", func() (bool, string) {
		if err := e.get(hung); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(hung.Status.Conditions, zygov1.ConditionReady), condStr(hung.Status.Conditions, zygov1.ConditionReady)
	})
	var stuck []*agentsv1.Sandbox
	for i := range 5 {
		sb := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("stuck-%d", i)}, Spec: agentsv1.SandboxSpec{NodeName: "hung"}}
		e.mustCreate(t, sb)
		stuck = append(stuck, sb)
	}
	waitFor(t, 30*time.Second, "five creates waiting on the hung agent", func() (bool, string) {
		_ = e.get(stuck[0])
		return h.creates.Load() == 5, fmt.Sprintf("%d creates; %s: %s", h.creates.Load(), stuck[0].Name, condStr(stuck[0].Status.Conditions, agentsv1.ConditionReady))
	})
	begin := time.Now()
	ok := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "beside-hung"}, Spec: agentsv1.SandboxSpec{NodeName: "node-a"}}
	e.mustCreate(t, ok)
	// Within the bound of a create (2 min) they would have held every worker; a minute is
	// room for a slow machine, far below it.
	waitFor(t, time.Minute, "a Sandbox on node-a Ready while the hung agent holds five creates", func() (bool, string) {
		if err := e.get(ok); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(ok.Status.Conditions, agentsv1.ConditionReady), condStr(ok.Status.Conditions, agentsv1.ConditionReady)
	})
	t.Logf("beside-hung Ready %v after it was made, with five creates hung", time.Since(begin).Round(time.Millisecond))
	for _, sb := range stuck {
		if err := e.get(sb); err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1.ConditionReady); c == nil || c.Reason != agentsv1.ReasonCreating {
			t.Errorf("%s while its agent hangs: %s, want Creating", sb.Name, condStr(sb.Status.Conditions, agentsv1.ConditionReady))
		}
	}

	// The agent answers (a refusal): each says so, and everything can be deleted.
	release()
	for _, sb := range stuck {
		waitFor(t, 30*time.Second, sb.Name+" says the agent refused", func() (bool, string) {
			if err := e.get(sb); err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1.ConditionReady)
			return c != nil && c.Reason == agentsv1.ReasonAgentUnavailable, condStr(sb.Status.Conditions, agentsv1.ConditionReady)
		})
	}
	for _, sb := range append(stuck, ok) {
		if err := e.c.Delete(bg, sb); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.c.Delete(bg, hung); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the Sandboxes and ZygoNode hung gone", func() (bool, string) {
		for _, sb := range append(stuck, ok) {
			if err := e.get(sb); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("%s: %v", sb.Name, err)
			}
		}
		err := e.get(hung)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}
