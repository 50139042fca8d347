package controller

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/big"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
)

// nodeSecretHashLen is the length of the hash part of a node secret name: 128 bits of sha256
// in base 62 (0-9a-zA-Z) take 22 characters.
const nodeSecretHashLen = 22

// NodeSecretName is the name SecretFile f of a namespace's object has in a node agent's
// secret store, and so the name of its file, /run/secrets/NODE-SECRET-NAME, which the daemon
// writes into a Sandbox (and each of its copies) and for each request of a Function (tmpfs,
// 0400): "k8s" + the first 128 bits of the sha256 of "NAMESPACE/SECRET/KEY" (where the value
// comes from) in base 62, 22 characters of [0-9a-zA-Z] + "_" + f.Name. Secret names are per
// node: two namespaces, or two objects of one namespace giving the same name to different
// Secrets, never share (or overwrite) one secret; 128 bits make a collision infeasible to
// search for (a 32-bit prefix, the first form, was found by a birthday search in a second),
// and pushSecrets refuses one anyway. The result (at most 127 characters for a name of at
// most 101) matches the daemon's secret-name pattern [A-Za-z_][A-Za-z0-9_]{0,127}
// (internal/secret.NamePattern).
func NodeSecretName(namespace string, f agentsv1.SecretFile) string {
	return "k8s" + secretSourceHash(secretSource(namespace, f)) + "_" + f.Name
}

// secretSourceHash is hash62; a var so that a test can make two sources collide.
var secretSourceHash = hash62

// secretSource is the "NAMESPACE/SECRET/KEY" a node secret's value comes from.
func secretSource(namespace string, f agentsv1.SecretFile) string {
	return namespace + "/" + f.SecretKeyRef.Name + "/" + f.SecretKeyRef.Key
}

// hash62 returns the first 128 bits of the sha256 of s in base 62, zero-padded to
// nodeSecretHashLen characters.
func hash62(s string) string {
	sum := sha256.Sum256([]byte(s))
	t := new(big.Int).SetBytes(sum[:16]).Text(62)
	return strings.Repeat("0", nodeSecretHashLen-len(t)) + t
}

// errSecretNotFound is wrapped when a SecretFile names a missing Secret or key, or when its
// node secret name is already another source's (errSecretConflict's message).
type errSecretNotFound struct{ msg string }

func (e *errSecretNotFound) Error() string { return e.msg }

// secretOwners returns, for every SecretFile of every Sandbox and Function of the cluster, its
// node secret name and the "NAMESPACE/SECRET/KEY" it comes from ("" when two sources share the
// name): the objects are the record of who owns a node secret (a Checkpoint's secrets are its
// Sandbox's).
func secretOwners(ctx context.Context, c client.Reader) (map[string]string, error) {
	owners := map[string]string{}
	add := func(ns string, files []agentsv1.SecretFile) {
		for _, f := range files {
			n, src := NodeSecretName(ns, f), secretSource(ns, f)
			if o, ok := owners[n]; ok && o != src {
				src = "" // two sources: the name is no one's
			}
			owners[n] = src
		}
	}
	var sbs agentsv1.SandboxList
	if err := c.List(ctx, &sbs); err != nil {
		return nil, fmt.Errorf("listing Sandboxes: %w", err)
	}
	for _, s := range sbs.Items {
		add(s.Namespace, s.Spec.Zygo.Secrets)
	}
	var fns zygov1.FunctionList
	if err := c.List(ctx, &fns); err != nil {
		return nil, fmt.Errorf("listing Functions: %w", err)
	}
	for _, f := range fns.Items {
		add(f.Namespace, f.Spec.Secrets)
	}
	return owners, nil
}

// pushSecrets reads each SecretFile's value from the namespace's Secrets and stores it on the
// agent under its node name; it returns those names. A missing Secret or key is an
// *errSecretNotFound naming the field, and so is a node name that another object of the
// cluster uses for a different NAMESPACE/SECRET/KEY (a hash collision: never overwritten, so
// one namespace never reads or replaces another's value); an agent error is wrapped.
func pushSecrets(ctx context.Context, c client.Reader, a Agent, namespace string, files []agentsv1.SecretFile, field string) ([]string, error) {
	if len(files) == 0 {
		return nil, nil
	}
	owners, err := secretOwners(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("checking who uses the node secret names: %w", err)
	}
	var names []string
	for i, f := range files {
		n := NodeSecretName(namespace, f)
		if o, ok := owners[n]; ok && o != secretSource(namespace, f) {
			return nil, &errSecretNotFound{fmt.Sprintf("%s[%d]: its node secret name %s is another Secret's (a hash collision): not stored, rename the Secret or key",
				field, i, n)}
		}
		var s corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: f.SecretKeyRef.Name}, &s); err != nil {
			return nil, &errSecretNotFound{fmt.Sprintf("%s[%d].secretKeyRef: secret %s/%s: %v", field, i, namespace, f.SecretKeyRef.Name, err)}
		}
		v, ok := s.Data[f.SecretKeyRef.Key]
		if !ok {
			return nil, &errSecretNotFound{fmt.Sprintf("%s[%d].secretKeyRef: secret %s/%s has no key %q", field, i, namespace, f.SecretKeyRef.Name, f.SecretKeyRef.Key)}
		}
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
