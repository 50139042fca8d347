package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	extv1 "github.com/zygo-run/zygo/internal/kube/api/extensions/v1beta1"
)

// TestClaimRequeuesAtShutdown: a claim with a shutdownTime to come is reconciled again just
// after it (nothing else wakes it then); one without, or past it, keeps the result it had.
func TestClaimRequeuesAtShutdown(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &ClaimReconciler{Now: func() time.Time { return now }}
	at := func(d time.Duration) *extv1.SandboxClaim {
		ts := metav1.NewTime(now.Add(d))
		return &extv1.SandboxClaim{Spec: extv1.SandboxClaimSpec{Lifecycle: &extv1.ClaimLifecycle{ShutdownTime: &ts}}}
	}
	for _, c := range []struct {
		name string
		cl   *extv1.SandboxClaim
		in   ctrl.Result
		want time.Duration
	}{
		{"no lifecycle", &extv1.SandboxClaim{}, ctrl.Result{}, 0},
		{"shutdown in 10s", at(10 * time.Second), ctrl.Result{}, 10*time.Second + 100*time.Millisecond},
		{"an earlier requeue stays", at(10 * time.Second), ctrl.Result{RequeueAfter: time.Second}, time.Second},
		{"a later requeue is brought forward", at(10 * time.Second), ctrl.Result{RequeueAfter: time.Hour}, 10*time.Second + 100*time.Millisecond},
		{"shutdown passed", at(-time.Minute), ctrl.Result{}, 0},
	} {
		if got := r.untilShutdown(c.cl, c.in).RequeueAfter; got != c.want {
			t.Errorf("%s: RequeueAfter %v, want %v", c.name, got, c.want)
		}
	}
}
