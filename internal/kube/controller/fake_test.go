package controller

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	extv1 "github.com/zygo-run/zygo/internal/kube/api/extensions/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// fakeAgent is an in-memory node agent. down makes every call fail as an unreachable agent.
type fakeAgent struct {
	mu        sync.Mutex
	name      string
	down      bool
	next      int
	sandboxes map[string]wire.Sandbox // by id
	secrets   map[string][]byte
	images    map[string]bool   // checkpoint ids
	functions map[string][]byte // name -> bundle
	creates   []wire.CreateSandboxBody
	forks     int
	invokes   int
	mintErr   error // SandboxAccessToken's answer, when set
	// refuseExport, when set, is ExportCheckpoint's error (crossnode_test.go).
	refuseExport error

	secretAt  map[string]time.Time // when each secret was set (zero: long ago)
	ckpts     []wire.Checkpoint    // the records of Checkpoint, oldest first
	forkFrom  []string             // the from of each Fork call
	failForks int                  // the next failForks forks fail every child (leak_test.go)
	hang      chan struct{}        // if not nil, CreateSandbox waits for it to close (or its ctx)
	// hangExport, if not nil, has ExportCheckpoint wait for it to close (or its ctx).
	hangExport chan struct{}
}

func newFakeAgent(name string) *fakeAgent {
	return &fakeAgent{name: name, sandboxes: map[string]wire.Sandbox{}, secrets: map[string][]byte{}, images: map[string]bool{}, functions: map[string][]byte{}}
}

func (f *fakeAgent) unreachable() error {
	return &zygo.Unreachable{Err: fmt.Errorf("dial tcp %s: connection refused", f.name)}
}

func notFound(what string) error {
	return &zygo.Error{Status: http.StatusNotFound, ErrorBody: wire.ErrorBody{Code: wire.CodeNotFound, Message: what + " not found"}}
}

func (f *fakeAgent) Status(context.Context) (wire.StatusBody, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return wire.StatusBody{}, f.unreachable()
	}
	return wire.StatusBody{Version: "test"}, nil
}

func (f *fakeAgent) CreateSandbox(ctx context.Context, o wire.CreateSandboxBody) (wire.Sandbox, error) {
	f.mu.Lock()
	hang := f.hang
	f.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return wire.Sandbox{}, &zygo.Unreachable{Err: ctx.Err()}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return wire.Sandbox{}, f.unreachable()
	}
	for _, n := range o.Secrets {
		if _, ok := f.secrets[n]; !ok {
			return wire.Sandbox{}, &zygo.Error{Status: 400, ErrorBody: wire.ErrorBody{Code: wire.CodeBadRequest, Message: "secrets: unknown " + n}}
		}
	}
	f.next++
	rec := wire.Sandbox{ID: fmt.Sprintf("sb-%s%d", f.name, f.next), Name: o.Name, State: "running", Generation: fmt.Sprintf("gen%d", f.next), Options: o, Address: fmt.Sprintf("10.0.0.%d", f.next)}
	f.sandboxes[rec.ID] = rec
	f.creates = append(f.creates, o)
	return rec, nil
}

func (f *fakeAgent) find(id string) (wire.Sandbox, bool) {
	for _, s := range f.sandboxes {
		if s.ID == id || s.Name == id {
			return s, true
		}
	}
	return wire.Sandbox{}, false
}

func (f *fakeAgent) GetSandbox(_ context.Context, id string) (wire.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return wire.Sandbox{}, f.unreachable()
	}
	if s, ok := f.find(id); ok {
		return s, nil
	}
	return wire.Sandbox{}, notFound("sandbox " + id)
}

func (f *fakeAgent) ListSandboxes(context.Context) ([]wire.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, f.unreachable()
	}
	var out []wire.Sandbox
	for _, s := range f.sandboxes {
		out = append(out, s)
	}
	return out, nil
}

func (f *fakeAgent) RemoveSandbox(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return f.unreachable()
	}
	s, ok := f.find(id)
	if !ok {
		return notFound("sandbox " + id)
	}
	delete(f.sandboxes, s.ID)
	return nil
}

func (f *fakeAgent) Checkpoint(_ context.Context, id, tag string) (wire.Checkpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.find(id); !ok {
		return wire.Checkpoint{}, notFound("sandbox " + id)
	}
	cid := "cp-" + tag
	if f.images[cid] { // tags are not unique on a daemon; ids are
		f.next++
		cid = fmt.Sprintf("cp-%s-%d", tag, f.next)
	}
	f.images[cid] = true
	cp := wire.Checkpoint{ID: cid, Tag: tag, SandboxID: id}
	f.ckpts = append(f.ckpts, cp)
	return cp, nil
}

// GetCheckpoint finds an image by id, else the newest with that tag, as the daemon does.
func (f *fakeAgent) GetCheckpoint(_ context.Context, ref string) (wire.Checkpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return wire.Checkpoint{}, f.unreachable()
	}
	for i := len(f.ckpts) - 1; i >= 0; i-- {
		if c := f.ckpts[i]; f.images[c.ID] && c.ID == ref {
			return c, nil
		}
	}
	for i := len(f.ckpts) - 1; i >= 0; i-- {
		if c := f.ckpts[i]; f.images[c.ID] && c.Tag == ref {
			return c, nil
		}
	}
	return wire.Checkpoint{}, notFound("checkpoint " + ref)
}

// RemoveCheckpoint refuses, as the daemon does, while a sandbox restored from the image exists.
func (f *fakeAgent) RemoveCheckpoint(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return f.unreachable()
	}
	if !f.images[id] {
		return notFound("checkpoint " + id)
	}
	for _, s := range f.sandboxes {
		if s.CheckpointID == id {
			return &zygo.Error{Status: http.StatusConflict, ErrorBody: wire.ErrorBody{Code: wire.CodeFailedPrecondition,
				Message: "checkpoint " + id + " is still referenced by sandbox " + s.ID}}
		}
	}
	delete(f.images, id)
	return nil
}

// Fork is ForkWith without names (as tests call it).
func (f *fakeAgent) Fork(ctx context.Context, id string, n int, from string, progress func(wire.ForkProgress)) (wire.ForkAnswer, error) {
	return f.ForkWith(ctx, id, wire.ForkBody{N: n, From: from}, progress)
}

// ForkWith names the children body.Names (as the daemon, refusing a name in use with 409),
// else after the source.
func (f *fakeAgent) ForkWith(_ context.Context, id string, body wire.ForkBody, _ func(wire.ForkProgress)) (wire.ForkAnswer, error) {
	n, from := body.N, body.From
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return wire.ForkAnswer{}, f.unreachable()
	}
	src, ok := f.find(id)
	if !ok {
		return wire.ForkAnswer{}, notFound("sandbox " + id)
	}
	if body.Names != nil && len(body.Names) != n {
		return wire.ForkAnswer{}, &zygo.Error{Status: 400, ErrorBody: wire.ErrorBody{Code: wire.CodeBadRequest, Message: "names: one per child"}}
	}
	for i, name := range body.Names {
		if _, taken := f.find(name); taken {
			return wire.ForkAnswer{}, &zygo.Error{Status: 409, ErrorBody: wire.ErrorBody{Code: wire.CodeExists, Message: fmt.Sprintf("names[%d]: a sandbox named %q already exists", i, name)}}
		}
	}
	f.forks++
	f.forkFrom = append(f.forkFrom, from)
	ans := wire.ForkAnswer{Checkpoint: wire.Checkpoint{ID: from}}
	if from == "" { // a fresh image tagged "fork", as the daemon takes
		ans.Checkpoint = wire.Checkpoint{ID: "cp-fork" + id, Tag: forkImageTag, SandboxID: id}
		if f.images[ans.Checkpoint.ID] {
			f.next++
			ans.Checkpoint.ID = fmt.Sprintf("cp-fork%s-%d", id, f.next)
		}
		f.images[ans.Checkpoint.ID] = true
		f.ckpts = append(f.ckpts, ans.Checkpoint)
	}
	if f.failForks > 0 { // every child failed (and was destroyed); the image stays
		f.failForks--
		for i := range n {
			ans.Children = append(ans.Children, wire.ForkChild{Index: i, Error: &wire.ErrorBody{Code: wire.CodeInternal, Message: "restore failed"}})
			ans.Failed++
		}
		return ans, &zygo.Error{Status: http.StatusInternalServerError, ErrorBody: wire.ErrorBody{Code: wire.CodeInternal, Message: "every child failed"}}
	}
	for i := range n {
		f.next++
		rec := wire.Sandbox{ID: fmt.Sprintf("sb-%s%d", f.name, f.next), Name: fmt.Sprintf("%s-%d", src.Name, i), State: "running",
			ParentID: src.ID, CheckpointID: ans.Checkpoint.ID, Generation: fmt.Sprintf("gen%d", f.next)}
		if body.Names != nil {
			rec.Name = body.Names[i]
		}
		f.sandboxes[rec.ID] = rec
		ans.Children = append(ans.Children, wire.ForkChild{Index: i, Sandbox: &rec})
		ans.Succeeded++
	}
	return ans, nil
}

func (f *fakeAgent) SetSecret(_ context.Context, name string, value []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return f.unreachable()
	}
	f.secrets[name] = append([]byte(nil), value...)
	if f.secretAt == nil {
		f.secretAt = map[string]time.Time{}
	}
	f.secretAt[name] = time.Now()
	return nil
}

func (f *fakeAgent) ListSecrets(context.Context) ([]wire.SecretMeta, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, f.unreachable()
	}
	out := make([]wire.SecretMeta, 0, len(f.secrets))
	for n := range f.secrets {
		out = append(out, wire.SecretMeta{Name: n, UpdatedAt: f.secretAt[n]})
	}
	return out, nil
}

// RemoveSecret refuses, as the daemon does, while a sandbox or a function names the secret.
func (f *fakeAgent) RemoveSecret(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return f.unreachable()
	}
	if _, ok := f.secrets[name]; !ok {
		return notFound("secret " + name)
	}
	inUse := func(user string) error {
		return &zygo.Error{Status: http.StatusConflict, ErrorBody: wire.ErrorBody{Code: wire.CodeFailedPrecondition,
			Message: "secret " + name + " is used by " + user}}
	}
	for _, s := range f.sandboxes {
		if slices.Contains(s.Options.Secrets, name) {
			return inUse(s.ID)
		}
	}
	for fn, b := range f.functions {
		files, err := untar(b)
		if err != nil {
			return err
		}
		var m manifest
		if _, err := decodeTOML(files["zygo.toml"], &m); err != nil {
			return err
		}
		if slices.Contains(m.Secrets, name) {
			return inUse(fn)
		}
	}
	delete(f.secrets, name)
	return nil
}

func (f *fakeAgent) Deploy(_ context.Context, bundle io.Reader) (wire.DeployResult, error) {
	b, err := io.ReadAll(bundle)
	if err != nil {
		return wire.DeployResult{}, err
	}
	files, err := untar(b)
	if err != nil {
		return wire.DeployResult{}, err
	}
	var m manifest
	if _, err := decodeTOML(files["zygo.toml"], &m); err != nil {
		return wire.DeployResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return wire.DeployResult{}, f.unreachable()
	}
	f.functions[m.Name] = b
	return wire.DeployResult{Name: m.Name, Version: fmt.Sprintf("v%d", len(b))}, nil
}

func (f *fakeAgent) Function(_ context.Context, name string) (wire.Function, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.functions[name]; !ok {
		return wire.Function{}, notFound("function " + name)
	}
	return wire.Function{Name: name, State: "ready"}, nil
}

func (f *fakeAgent) RemoveFunction(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return f.unreachable()
	}
	delete(f.functions, name)
	return nil
}

func (f *fakeAgent) Invoke(_ context.Context, name string, event []byte) (*zygo.InvokeResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.functions[name]; !ok {
		return nil, notFound("function " + name)
	}
	f.invokes++
	return &zygo.InvokeResult{Value: bytes.TrimSpace([]byte(fmt.Sprintf(`{"node":%q,"event":%s}`, f.name, event))), RequestID: "req"}, nil
}

// fakeDialer hands out the fakeAgent of each node.
type fakeDialer map[string]*fakeAgent

func (d fakeDialer) Agent(_ context.Context, n *zygov1.ZygoNode) (Agent, error) {
	a, ok := d[n.Name]
	if !ok {
		return nil, fmt.Errorf("%w: no agent %s", errTokenMissing, n.Name)
	}
	return a, nil
}

// env is a fake API server with two Ready nodes, a and b, and their agents.
type env struct {
	t      *testing.T
	c      client.Client
	agents fakeDialer
}

func newEnv(t *testing.T, objs ...client.Object) *env {
	t.Helper()
	nodes := []client.Object{readyNode("a"), readyNode("b")}
	c := fake.NewClientBuilder().WithScheme(NewScheme()).
		WithStatusSubresource(&agentsv1.Sandbox{}, &extv1.SandboxClaim{}, &extv1.SandboxWarmPool{},
			&zygov1.ZygoNode{}, &zygov1.Checkpoint{}, &zygov1.SandboxFork{}, &zygov1.Function{}).
		WithObjects(append(nodes, objs...)...).
		WithInterceptorFuncs(interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if obj.GetUID() == "" { // as an API server does: the controller names what it makes for UIDs
				obj.SetUID(types.UID("uid-" + obj.GetNamespace() + "-" + obj.GetName()))
			}
			return c.Create(ctx, obj, opts...)
		}}).Build()
	return &env{t: t, c: c, agents: fakeDialer{"a": newFakeAgent("a"), "b": newFakeAgent("b")}}
}

func readyNode(name string) *zygov1.ZygoNode {
	return &zygov1.ZygoNode{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: zygov1.ZygoNodeSpec{Address: "127.0.0.1:1", TokenSecretRef: zygov1.SecretRef{Name: "tok"}},
		Status: zygov1.ZygoNodeStatus{Conditions: []metav1.Condition{{Type: zygov1.ConditionReady, Status: metav1.ConditionTrue,
			Reason: zygov1.ReasonAgentReady, LastTransitionTime: metav1.Now()}}}}
}

// reconcile runs r on obj's key until it asks for no quick requeue (at most 10 rounds).
func (e *env) reconcile(r interface {
	Reconcile(context.Context, ctrl.Request) (ctrl.Result, error)
}, obj client.Object) ctrl.Result {
	e.t.Helper()
	var res ctrl.Result
	for range 10 {
		var err error
		res, err = r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
		if err != nil {
			e.t.Fatalf("reconciling %s: %v", obj.GetName(), err)
		}
		if res.RequeueAfter == 0 || res.RequeueAfter >= ProbeEvery {
			return res
		}
	}
	return res
}

func (e *env) get(obj client.Object) {
	e.t.Helper()
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		e.t.Fatalf("reading %s: %v", obj.GetName(), err)
	}
}

func (e *env) create(obj client.Object) {
	e.t.Helper()
	if err := e.c.Create(context.Background(), obj); err != nil {
		e.t.Fatalf("creating %s: %v", obj.GetName(), err)
	}
}

// objMeta returns the metadata of a namespaced test object with a UID.
func objMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}
}

func secret(name, key, value string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string][]byte{key: []byte(value)}}
}

func wireCreate(name string) wire.CreateSandboxBody { return wire.CreateSandboxBody{Name: name} }

// SandboxAccessToken answers a token naming the sandbox; mintErr, when set, is the answer.
func (f *fakeAgent) SandboxAccessToken(_ context.Context, id string) (wire.SandboxAccessToken, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return wire.SandboxAccessToken{}, f.unreachable()
	}
	if f.mintErr != nil {
		return wire.SandboxAccessToken{}, f.mintErr
	}
	rec, ok := f.find(id)
	if !ok {
		return wire.SandboxAccessToken{}, notFound("sandbox " + id)
	}
	return wire.SandboxAccessToken{SandboxID: rec.ID, Token: wire.SandboxAccessTokenPrefix + rec.ID + "_" + f.name}, nil
}
