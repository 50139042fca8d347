package controller

import (
	"context"
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
)

// LabelAgentPod marks the ZygoNodes the discovery made, with the agent pod's name.
const LabelAgentPod = "zygo.run/agent-pod"

// AgentDiscovery keeps one ZygoNode per running node-agent pod (the DaemonSet's): named
// "node-" + the pod's node, at POD_IP:Port, with the token and TLS Secrets the DaemonSet
// uses. A pod that stops running, or goes, takes its ZygoNode with it.
type AgentDiscovery struct {
	Client    client.Client
	Namespace string          // where the agent pods run
	Selector  labels.Selector // which pods are agents
	Port      int             // the agents' --listen port
	TokenRef  zygov1.SecretRef
	TLS       *zygov1.AgentTLS // nil: plain HTTP (loopback agents only)
}

// Reconcile makes, updates or deletes the ZygoNode of one agent pod.
func (d *AgentDiscovery) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pod corev1.Pod
	err := d.Client.Get(ctx, req.NamespacedName, &pod)
	if apierrors.IsNotFound(err) || (err == nil && (pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "")) {
		return ctrl.Result{}, d.forget(ctx, req.Name)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	n := &zygov1.ZygoNode{ObjectMeta: metav1.ObjectMeta{Name: "node-" + pod.Spec.NodeName}}
	_, err = controllerutil.CreateOrUpdate(ctx, d.Client, n, func() error {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[LabelAgentPod] = pod.Name
		n.Spec = zygov1.ZygoNodeSpec{Address: net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(d.Port)),
			TokenSecretRef: d.TokenRef, TLS: d.TLS, NodeName: pod.Spec.NodeName}
		return nil
	})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("writing ZygoNode %s for pod %s: %w", n.Name, pod.Name, err)
	}
	return ctrl.Result{}, nil
}

// forget deletes the ZygoNode made for pod.
func (d *AgentDiscovery) forget(ctx context.Context, pod string) error {
	var list zygov1.ZygoNodeList
	if err := d.Client.List(ctx, &list, client.MatchingLabels{LabelAgentPod: pod}); err != nil {
		return fmt.Errorf("listing the ZygoNodes of pod %s: %w", pod, err)
	}
	for i := range list.Items {
		if err := d.Client.Delete(ctx, &list.Items[i]); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting ZygoNode %s: %w", list.Items[i].Name, err)
		}
	}
	return nil
}

// SetupWithManager registers the discovery on the agent pods of Namespace.
func (d *AgentDiscovery) SetupWithManager(mgr ctrl.Manager) error {
	sel := d.Selector
	ns := d.Namespace
	return ctrl.NewControllerManagedBy(mgr).Named("agentdiscovery").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == ns && sel.Matches(labels.Set(o.GetLabels()))
		}))).Complete(d)
}
