package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// The access Secret of a Sandbox: what a user of that one sandbox needs to reach it on its node
// agent, in the Sandbox's namespace, so that Kubernetes RBAC on Secrets of that namespace says
// who may use it. Its token is the sandbox's access token (POST /v1/sandboxes/{id}/access-token
// on the agent): the agent accepts it for that sandbox's record, exec, run-code, files,
// generation, services and ports only, and it dies with the sandbox. The node token stays in
// the controller's namespace and is never copied out.

// AccessSecretType is the type of every access Secret.
const AccessSecretType corev1.SecretType = "zygo.run/sandbox-access"

// LabelAccessFor is on every access Secret: the name of its Sandbox (NameLabel).
const LabelAccessFor = "zygo.run/sandbox"

// Keys of an access Secret.
const (
	AccessKeyToken      = "token"      // the sandbox's access token (bearer)
	AccessKeyAddress    = "address"    // the node agent's API address, HOST:PORT
	AccessKeySandboxID  = "sandboxID"  // the Zygo sandbox id on that node
	AccessKeyCA         = "ca.crt"     // the agent's CA (PEM), when it serves TLS
	AccessKeyServerName = "serverName" // the name its certificate holds, when it serves TLS and one is set
)

// AccessSecretName returns the name of the access Secret of the Sandbox called name:
// NAME-zygo-access when that fits an object name (253 characters, so NAME of at most 241),
// else the start of NAME, "-zygo-access-" and 16 hex digits of its SHA-256. The plain form
// always ends in "-zygo-access" and the hashed one never does: a hashed name cannot be that
// of another Sandbox's plain one.
func AccessSecretName(name string) string {
	const suffix = "-zygo-access"
	if len(name)+len(suffix) <= 253 {
		return name + suffix
	}
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:8])
	return name[:253-len(suffix)-1-len(h)] + suffix + "-" + h
}

// ensureAccess writes sb's access Secret (minting the token on a) and records its name in sb's
// status. A warm pool's source gets none: nobody but the pool uses it, and what is done in it
// reaches every claim forked from it. It returns why it could not ("" when done), or an error
// for what a retry may cure soon (the API server's).
func (r *SandboxReconciler) ensureAccess(ctx context.Context, sb *agentsv1.Sandbox, node *zygov1.ZygoNode, a Agent) (string, error) {
	if isWarmSource(sb) {
		return "", nil
	}
	cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	at, err := a.SandboxAccessToken(cctx, sb.Status.Zygo.SandboxID)
	cancel()
	if err != nil {
		return fmt.Sprintf("minting the sandbox's access token on node %s: %v", node.Name, err), nil
	}
	want := map[string][]byte{AccessKeyToken: []byte(at.Token), AccessKeyAddress: []byte(node.Spec.Address),
		AccessKeySandboxID: []byte(at.SandboxID)}
	if t := node.Spec.TLS; t != nil {
		ca, err := r.nodeCA(ctx, t)
		if err != nil {
			return err.Error(), nil
		}
		want[AccessKeyCA] = ca
		if t.ServerName != "" {
			want[AccessKeyServerName] = []byte(t.ServerName)
		}
	}
	name := AccessSecretName(sb.Name)
	var s corev1.Secret
	err = r.Client.Get(ctx, types.NamespacedName{Namespace: sb.Namespace, Name: name}, &s)
	switch {
	case apierrors.IsNotFound(err):
		s = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sb.Namespace, Name: name, Labels: map[string]string{LabelAccessFor: NameLabel(sb.Name)},
			OwnerReferences: []metav1.OwnerReference{accessOwner(sb)}}, Type: AccessSecretType, Data: want}
		if err := r.Client.Create(ctx, &s); err != nil {
			return "", fmt.Errorf("creating Secret %s: %w", name, err)
		}
		log.FromContext(ctx).Info("access Secret written", "secret", name, "sandbox_id", at.SandboxID)
	case err != nil:
		return "", fmt.Errorf("reading Secret %s: %w", name, err)
	case !ownedBy(&s, sb):
		return fmt.Sprintf("Secret %s exists and is not this Sandbox's (no owner reference to it): "+
			"the controller does not overwrite it; delete or rename it", name), nil
	case !sameData(s.Data, want):
		s.Data = want
		if err := r.Client.Update(ctx, &s); err != nil {
			return "", fmt.Errorf("updating Secret %s: %w", name, err)
		}
	}
	sb.Status.Zygo.AccessSecretName = name
	return "", nil
}

// nodeCA returns the CA of an agent serving TLS, from the controller's namespace.
func (r *SandboxReconciler) nodeCA(ctx context.Context, t *zygov1.AgentTLS) ([]byte, error) {
	key := t.CASecretRef.Key
	if key == "" {
		key = "ca.crt"
	}
	var s corev1.Secret
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: t.CASecretRef.Name}, &s); err != nil {
		return nil, fmt.Errorf("reading the agent's CA Secret %s/%s: %w", r.Namespace, t.CASecretRef.Name, err)
	}
	if len(s.Data[key]) == 0 {
		return nil, fmt.Errorf("the agent's CA Secret %s/%s has no key %q", r.Namespace, t.CASecretRef.Name, key)
	}
	return s.Data[key], nil
}

// removeAccess deletes sb's access Secret, if it is sb's. The owner reference would have the
// garbage collector do it on a cluster; this does it at once, and where none runs.
func (r *SandboxReconciler) removeAccess(ctx context.Context, sb *agentsv1.Sandbox) error {
	var s corev1.Secret
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: sb.Namespace, Name: AccessSecretName(sb.Name)}, &s)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("reading the access Secret: %w", err)
	}
	if !ownedBy(&s, sb) {
		return nil
	}
	uid := s.UID
	err = r.Client.Delete(ctx, &s, client.Preconditions{UID: &uid})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the access Secret %s: %w", s.Name, err)
	}
	return nil
}

func accessOwner(sb *agentsv1.Sandbox) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: agentsv1.GroupVersion.String(), Kind: "Sandbox", Name: sb.Name, UID: sb.UID, Controller: &yes}
}

// ownedBy reports whether s has an owner reference to sb (by UID).
func ownedBy(s *corev1.Secret, sb *agentsv1.Sandbox) bool {
	for _, o := range s.OwnerReferences {
		if o.UID == sb.UID && o.Kind == "Sandbox" {
			return true
		}
	}
	return false
}

func sameData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// recordAndGrant records rec in sb's status (record) and, once the sandbox runs, writes its
// access Secret; a Secret it could not write makes sb not Ready, saying why.
func (r *SandboxReconciler) recordAndGrant(ctx context.Context, sb *agentsv1.Sandbox, node *zygov1.ZygoNode, a Agent, rec wire.Sandbox) (ctrl.Result, error) {
	r.record(sb, node, rec)
	if rec.State != "running" {
		return ctrl.Result{RequeueAfter: ProbeEvery}, nil
	}
	why, err := r.ensureAccess(ctx, sb, node, a)
	if err != nil {
		ready(sb, false, agentsv1.ReasonAccessSecretFailed, err.Error())
		return ctrl.Result{}, err
	}
	if why != "" {
		ready(sb, false, agentsv1.ReasonAccessSecretFailed, why)
	}
	return ctrl.Result{RequeueAfter: ProbeEvery}, nil
}
