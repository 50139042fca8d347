// Package controller is Zygo's Kubernetes controller: reconcilers (controller-runtime) that turn
// the agent-sandbox resources (Sandbox, SandboxTemplate, SandboxClaim, SandboxWarmPool) and
// Zygo's own (ZygoNode, Checkpoint, SandboxFork, Function) into calls on node agents — `zygo
// serve` daemons reached over their TCP API with a token — and the HTTP route that invokes
// Functions on the nodes serving them. docs/kubernetes.md is the design; cmd/zygo-controller
// is the binary. Per-request traffic (invokes) never touches the API server.
package controller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// Agent is the part of a node agent's API the controller uses. *zygo.Client implements it;
// unit tests use a fake. Every method is safe for concurrent use; errors are the SDK's
// (*zygo.Error for an answer, *zygo.Unreachable when the agent did not answer).
type Agent interface {
	Status(ctx context.Context) (wire.StatusBody, error)
	CreateSandbox(ctx context.Context, opts wire.CreateSandboxBody) (wire.Sandbox, error)
	// GetSandbox takes an id or a name.
	GetSandbox(ctx context.Context, id string) (wire.Sandbox, error)
	ListSandboxes(ctx context.Context) ([]wire.Sandbox, error)
	RemoveSandbox(ctx context.Context, id string) error
	Checkpoint(ctx context.Context, id, tag string) (wire.Checkpoint, error)
	RemoveCheckpoint(ctx context.Context, checkpoint string) error
	// GetCheckpoint takes an id or a tag.
	GetCheckpoint(ctx context.Context, checkpoint string) (wire.Checkpoint, error)
	// ForkWith makes body.N copies of sandbox id from checkpoint body.From (empty: a fresh
	// one), named body.Names (the controller always names them: forkCopyName, nodeSandboxName).
	ForkWith(ctx context.Context, id string, body wire.ForkBody, progress func(wire.ForkProgress)) (wire.ForkAnswer, error)
	// ExportCheckpoint, ImportCheckpoint and Restore copy an image to another node and
	// restore it there (a cross-node SandboxFork, crossnode.go).
	ExportCheckpoint(ctx context.Context, checkpoint string) (*zygo.CheckpointImage, error)
	ImportCheckpoint(ctx context.Context, r io.Reader, size int64, sha256, tag string) (wire.Checkpoint, error)
	Restore(ctx context.Context, checkpoint string, opts wire.RestoreBody) (wire.Sandbox, error)
	SetSecret(ctx context.Context, name string, value []byte) error
	ListSecrets(ctx context.Context) ([]wire.SecretMeta, error)
	// RemoveSecret fails with a conflict (zygo.IsConflict) while a function, sandbox or
	// checkpoint of the agent names the secret.
	RemoveSecret(ctx context.Context, name string) error
	Deploy(ctx context.Context, bundle io.Reader) (wire.DeployResult, error)
	Function(ctx context.Context, name string) (wire.Function, error)
	RemoveFunction(ctx context.Context, name string) error
	Invoke(ctx context.Context, name string, event []byte) (*zygo.InvokeResult, error)
	// SandboxAccessToken mints the access token of sandbox id (access.go).
	SandboxAccessToken(ctx context.Context, id string) (wire.SandboxAccessToken, error)
}

var _ Agent = (*zygo.Client)(nil)

// Dialer returns the Agent of a ZygoNode.
type Dialer interface {
	// Agent returns a client of node's agent. It fails (wrapping errTokenMissing) when the
	// token or CA Secret cannot be read. It does not call the agent.
	Agent(ctx context.Context, node *zygov1.ZygoNode) (Agent, error)
}

// errTokenMissing is wrapped by Dialer.Agent's error when a Secret the node names is missing.
var errTokenMissing = errors.New("agent credentials missing")

// SecretDialer builds SDK clients from a ZygoNode's spec and the Secrets it names, read from
// Namespace (the controller's). Clients are cached per node and resourceVersion, so that a
// changed spec or a new token takes effect at the next call.
type SecretDialer struct {
	Reader    client.Reader
	Namespace string

	mu    sync.Mutex // guards cache
	cache map[string]cachedAgent
}

type cachedAgent struct {
	version string // the ZygoNode's resourceVersion plus the Secrets' ones
	agent   Agent
}

// Agent implements Dialer.
func (d *SecretDialer) Agent(ctx context.Context, node *zygov1.ZygoNode) (Agent, error) {
	token, tokVer, err := d.secretKey(ctx, node.Spec.TokenSecretRef, "token")
	if err != nil {
		return nil, err
	}
	version := node.ResourceVersion + "/" + tokVer
	var tc *tls.Config
	if t := node.Spec.TLS; t != nil {
		ca, caVer, err := d.secretKey(ctx, t.CASecretRef, "ca.crt")
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("%w: secret %s key ca.crt holds no PEM certificate", errTokenMissing, t.CASecretRef.Name)
		}
		tc = &tls.Config{RootCAs: pool, ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
		version += "/" + caVer
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.cache[node.Name]; ok && c.version == version {
		return c.agent, nil
	}
	var a Agent
	if tc != nil {
		a = zygo.NewTLSClient(node.Spec.Address, string(token), tc)
	} else {
		a = zygo.NewTCPClient(node.Spec.Address, string(token))
	}
	if d.cache == nil {
		d.cache = map[string]cachedAgent{}
	}
	d.cache[node.Name] = cachedAgent{version: version, agent: a}
	return a, nil
}

// secretKey returns ref's value (trimmed of a final newline for a token) and the Secret's
// resourceVersion; def is the key when ref names none.
func (d *SecretDialer) secretKey(ctx context.Context, ref zygov1.SecretRef, def string) ([]byte, string, error) {
	key := ref.Key
	if key == "" {
		key = def
	}
	var s corev1.Secret
	if err := d.Reader.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: ref.Name}, &s); err != nil {
		return nil, "", fmt.Errorf("%w: reading secret %s/%s: %w", errTokenMissing, d.Namespace, ref.Name, err)
	}
	v, ok := s.Data[key]
	if !ok || len(v) == 0 {
		return nil, "", fmt.Errorf("%w: secret %s/%s has no key %q", errTokenMissing, d.Namespace, ref.Name, key)
	}
	if def == "token" {
		for len(v) > 0 && (v[len(v)-1] == '\n' || v[len(v)-1] == '\r') {
			v = v[:len(v)-1]
		}
	}
	return v, s.ResourceVersion, nil
}

// isUnreachable reports whether err means the agent did not answer at all.
func isUnreachable(err error) bool {
	var u *zygo.Unreachable
	return errors.As(err, &u) || errors.Is(err, context.DeadlineExceeded)
}
