package controller

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// Garbage collection of the Zygo secrets the controller stores on node agents
// (NodeSecretName). A secret is removed from a node once no object the controller placed
// there needs it any more:
//
//   - right after an object lets go of the node (a Sandbox's sandbox is removed, a Function
//     is removed from it), for that object's own secrets (releaseSecrets);
//   - at every successful probe of the node, for every secret of the controller's naming on it
//     (collectSecrets), except those stored within DefaultSecretGrace (a create or deploy may
//     be about to name it).
//
// The agent refuses to remove a secret that a function, sandbox or checkpoint of it still
// names: that refusal is "still in use", the secret stays and is tried again at the next probe.
// A removal is never forced.

// DefaultSecretGrace is how old (by the agent's clock) a secret must be before the periodic
// collection may remove it: longer than a secret's store and the create or deploy that follows
// it (agentCallTimeout + createTimeout), plus room for clock skew between controller and node.
const DefaultSecretGrace = 5 * time.Minute

// nodeSecretRE matches the names NodeSecretName gives, and those of its first form ("k8s" + 8
// hex digits + "_" + NAME, before 128-bit hashes), which an upgraded controller still
// collects: only those are the controller's.
var nodeSecretRE = regexp.MustCompile(`^k8s([0-9a-zA-Z]{22}|[0-9a-f]{8})_[A-Za-z_][A-Za-z0-9_]*$`)

// secretsNeeded returns the secret names that objects other than except (by UID; "" for none)
// still need on node: those of every Sandbox placed there or not placed yet, of every Function
// served there, and of every Function not yet settled (its spec not yet deployed everywhere:
// a deploy may be under way on any node), and of the source Sandbox of every Checkpoint there.
func secretsNeeded(ctx context.Context, c client.Reader, node string, except types.UID) (map[string]bool, error) {
	need := map[string]bool{}
	add := func(ns string, files []agentsv1.SecretFile) {
		for _, f := range files {
			need[NodeSecretName(ns, f)] = true
		}
	}
	var sbs agentsv1.SandboxList
	if err := c.List(ctx, &sbs); err != nil {
		return nil, fmt.Errorf("listing Sandboxes: %w", err)
	}
	byKey := map[types.NamespacedName]*agentsv1.Sandbox{}
	for i := range sbs.Items {
		s := &sbs.Items[i]
		byKey[client.ObjectKeyFromObject(s)] = s
		if s.UID != except && (s.Status.NodeName == node || s.Status.NodeName == "") {
			add(s.Namespace, s.Spec.Zygo.Secrets)
		}
	}
	var fns zygov1.FunctionList
	if err := c.List(ctx, &fns); err != nil {
		return nil, fmt.Errorf("listing Functions: %w", err)
	}
	for _, f := range fns.Items {
		if f.UID == except {
			continue
		}
		if servedOn(&f, node) || (f.DeletionTimestamp == nil && !functionSettled(&f)) {
			add(f.Namespace, f.Spec.Secrets)
		}
	}
	var cks zygov1.CheckpointList
	if err := c.List(ctx, &cks); err != nil {
		return nil, fmt.Errorf("listing Checkpoints: %w", err)
	}
	for _, ck := range cks.Items {
		if ck.UID == except || ck.Status.NodeName != node {
			continue
		}
		if s := byKey[types.NamespacedName{Namespace: ck.Namespace, Name: ck.Spec.SandboxRef.Name}]; s != nil {
			add(s.Namespace, s.Spec.Zygo.Secrets)
		}
	}
	return need, nil
}

// servedOn reports whether f's status lists node.
func servedOn(f *zygov1.Function, node string) bool {
	for _, n := range f.Status.Nodes {
		if n.Name == node {
			return true
		}
	}
	return false
}

// functionSettled reports whether f's current spec is deployed on all the nodes it asks for
// (Ready for its generation): then its status.nodes is where its secrets are.
func functionSettled(f *zygov1.Function) bool {
	c := meta.FindStatusCondition(f.Status.Conditions, zygov1.ConditionReady)
	return c != nil && c.Status == "True" && c.ObservedGeneration == f.Generation && f.Status.ObservedGeneration == f.Generation
}

// releaseSecrets removes from node's agent the secrets of files (of namespace ns, the object
// whose UID is owner) that nothing else placed on node needs. It is called once owner let go
// of the node. A secret the agent still finds in use stays (the periodic collection tries
// again); an error is logged, not returned: the node's state is right either way.
func releaseSecrets(ctx context.Context, c client.Reader, a Agent, node, ns string, files []agentsv1.SecretFile, owner types.UID) {
	if len(files) == 0 {
		return
	}
	need, err := secretsNeeded(ctx, c, node, owner)
	if err != nil {
		log.FromContext(ctx).Info("not releasing secrets", "node", node, "error", err)
		return
	}
	for _, f := range files {
		n := NodeSecretName(ns, f)
		if need[n] {
			continue
		}
		if err := removeNodeSecret(ctx, a, n); err != nil {
			log.FromContext(ctx).Info("releasing a secret failed; the periodic collection retries", "node", node, "secret", n, "error", err)
		}
	}
}

// collectSecrets removes from node's agent every secret of the controller's naming that
// nothing placed there needs and that is older than grace (by the agent's clock against now).
// A secret in use stays. It returns the removal errors, joined.
func collectSecrets(ctx context.Context, c client.Reader, a Agent, node string, now time.Time, grace time.Duration) error {
	lctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	have, err := a.ListSecrets(lctx)
	cancel()
	if err != nil {
		return fmt.Errorf("listing the node's secrets: %w", err)
	}
	var mine []string
	for _, s := range have {
		if nodeSecretRE.MatchString(s.Name) && now.Sub(s.UpdatedAt) >= grace {
			mine = append(mine, s.Name)
		}
	}
	if len(mine) == 0 {
		return nil
	}
	need, err := secretsNeeded(ctx, c, node, "")
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range mine {
		if !need[n] {
			if err := removeNodeSecret(ctx, a, n); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeNodeSecret removes secret n from the agent; gone already is success, and so is "still
// in use" (the agent's refusal: the secret stays, to be tried again).
func removeNodeSecret(ctx context.Context, a Agent, n string) error {
	cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	defer cancel()
	err := a.RemoveSecret(cctx, n)
	switch {
	case err == nil:
		log.FromContext(ctx).Info("removed an unused secret", "secret", n)
		return nil
	case zygo.IsNotFound(err), zygo.IsConflict(err):
		return nil
	}
	return fmt.Errorf("removing secret %s: %w", n, err)
}
