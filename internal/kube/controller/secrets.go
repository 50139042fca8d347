package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
)

// NodeSecretName is the name SecretFile f of a namespace's object has in a node agent's
// secret store, and so the name of its file, /run/secrets/NODE-SECRET-NAME, which the daemon
// writes into a Sandbox (and each of its copies) and for each request of a Function (tmpfs,
// 0400): "k8s" + the first 8 hex digits of the sha256 of "NAMESPACE/SECRET/KEY" (where the
// value comes from) + "_" + f.Name. Secret names are per node: two namespaces, or two objects
// of one namespace giving the same name to different Secrets, never share (or overwrite) one
// secret. The result (at most 113 characters for a name of at most 101) matches the daemon's
// secret-name pattern [A-Za-z_][A-Za-z0-9_]{0,127}.
func NodeSecretName(namespace string, f agentsv1.SecretFile) string {
	sum := sha256.Sum256([]byte(namespace + "/" + f.SecretKeyRef.Name + "/" + f.SecretKeyRef.Key))
	return "k8s" + hex.EncodeToString(sum[:4]) + "_" + f.Name
}

// errSecretNotFound is wrapped when a SecretFile names a missing Secret or key.
type errSecretNotFound struct{ msg string }

func (e *errSecretNotFound) Error() string { return e.msg }

// pushSecrets reads each SecretFile's value from the namespace's Secrets and stores it on the
// agent under its node name; it returns those names. A missing Secret or key is an
// *errSecretNotFound naming the field; an agent error is wrapped.
func pushSecrets(ctx context.Context, c client.Reader, a Agent, namespace string, files []agentsv1.SecretFile, field string) ([]string, error) {
	var names []string
	for i, f := range files {
		var s corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: f.SecretKeyRef.Name}, &s); err != nil {
			return nil, &errSecretNotFound{fmt.Sprintf("%s[%d].secretKeyRef: secret %s/%s: %v", field, i, namespace, f.SecretKeyRef.Name, err)}
		}
		v, ok := s.Data[f.SecretKeyRef.Key]
		if !ok {
			return nil, &errSecretNotFound{fmt.Sprintf("%s[%d].secretKeyRef: secret %s/%s has no key %q", field, i, namespace, f.SecretKeyRef.Name, f.SecretKeyRef.Key)}
		}
		n := NodeSecretName(namespace, f)
		cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
		err := a.SetSecret(cctx, n, v)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("storing secret %s on the agent: %w", f.Name, err)
		}
		names = append(names, n)
	}
	return names, nil
}
