// Package e2ekube drives Zygo under Kubernetes end to end: a real kube-apiserver and etcd
// (internal/kube/kubetest, built from the Go module proxy by make kube-testenv) with the CRDs of
// deploy/crds, the controller (internal/kube/controller) in this process, and two real `zygo
// serve` daemons on separate state dirs standing in for two nodes (real runsc, real Python).
//
// Needs root, runsc and the API server's binaries; a missing one fails the test with how to
// get it, it never skips.
package e2ekube

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/zygo-run/zygo/internal/daemon"
	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	extv1 "github.com/zygo-run/zygo/internal/kube/api/extensions/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/internal/kube/controller"
	"github.com/zygo-run/zygo/internal/kube/kubetest"
	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
	"github.com/zygo-run/zygo/test/e2eutil"
)

const sysNS = "zygo-system" // the controller's namespace, with the agents' token Secrets

var (
	zygoBin string
	repo    = e2eutil.RepoRoot()
)

func TestMain(m *testing.M) {
	bin, cleanup, err := e2eutil.Build(true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	zygoBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// node is one `zygo serve` with a TCP listener, standing in for a Kubernetes node.
type node struct {
	*e2eutil.Process
	name, addr, token string
}

// startNode starts a daemon on a fresh state dir listening on a free loopback port.
func startNode(t *testing.T, name string) *node {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("gVisor sandboxes need root: run this test as root")
	}
	if _, err := os.Stat("/usr/local/bin/runsc"); err != nil {
		if _, err := exec.LookPath("runsc"); err != nil {
			t.Fatal("runsc not found: install the pinned static build with `sudo scripts/install-runsc.sh` (or `make deps`)")
		}
	}
	dir, err := os.MkdirTemp("/tmp", "zk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A node stopped while it held sandboxes (testFunction stops node-b) keeps runsc's
		// null-netns mount under dir (the daemon releases it only with no container left):
		// unmount what is left, or RemoveAll cannot remove dir and /tmp collects mounts.
		for _, m := range e2eutil.MountsUnder(dir) {
			t.Logf("unmounting %s left under node %s's state dir", m, name)
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
		os.RemoveAll(dir)
	})
	addr := freeAddr(t)
	p := &e2eutil.Process{T: t, Bin: zygoBin, StateDir: dir, Args: []string{"--listen", addr, "--no-sandbox-network"}}
	p.Start(60 * time.Second)
	t.Cleanup(func() { p.Stop(60 * time.Second) })
	t.Cleanup(func() { // runs before Stop: what the node did, for a failure's why
		if t.Failed() {
			lines := strings.Split(strings.TrimSpace(p.Log.String()), "\n")
			t.Logf("node %s: last lines of its daemon's log:\n%s", name, strings.Join(lines[max(0, len(lines)-80):], "\n"))
		}
	})
	// Runs before Stop (cleanups run last-registered first): a daemon's sandboxes outlive it by
	// design (recovered at its next start), so a node that still holds one at the end removes it,
	// or its runsc processes and the null-netns mount under dir would outlive the test.
	t.Cleanup(func() { removeSandboxes(t, p) })
	tok, err := os.ReadFile(daemon.TokenPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	return &node{Process: p, name: name, addr: addr, token: strings.TrimSpace(string(tok))}
}

// removeSandboxes removes every sandbox p still holds, if p is running.
func removeSandboxes(t *testing.T, p *e2eutil.Process) {
	if !p.Running() {
		return
	}
	out, errOut, code := p.CLI("", time.Minute, "sandbox", "ls", "-q")
	if code != 0 {
		t.Logf("listing the node's sandboxes at cleanup: exit %d: %s", code, errOut)
		return
	}
	if ids := strings.Fields(out); len(ids) > 0 {
		if _, errOut, code := p.CLI("", 2*time.Minute, append([]string{"sandbox", "rm"}, ids...)...); code != 0 {
			t.Errorf("removing the node's sandboxes %v at cleanup: exit %d: %s", ids, code, errOut)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitFor polls ok every 200 ms until it returns true, failing the test after limit with what
// the last poll said.
func waitFor(t *testing.T, limit time.Duration, what string, ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		done, state := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, limit, state)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// controllerSA is the user the controller runs as in a cluster (deploy/rbac.yaml).
const controllerSA = "system:serviceaccount:" + sysNS + ":zygo-controller"

// routeAudience is the audience deploy/controller.yaml's --route-audience names.
const routeAudience = "zygo-route"

// controllerConfig is admin with every request impersonating controllerSA: the API server
// checks each of the controller's calls against deploy/rbac.yaml (a missing verb is a
// forbidden error in the controller's log and a test that fails).
func controllerConfig(admin *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: controllerSA}
	return cfg
}

// applyManifest applies (server-side, for real) every object of the YAML file path.
func applyManifest(t *testing.T, c client.Client, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, doc := range bytes.Split(b, []byte("\n---\n")) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("%s document %d: %v", path, i, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("zygo-e2e"), client.ForceOwnership); err != nil {
			t.Fatalf("%s: applying %s %s: %v", path, u.GetKind(), u.GetName(), err)
		}
	}
}

// env is the API server, the client and the controller's route.
type env struct {
	c     client.Client
	cfg   *rest.Config // the admin's
	route string
	nodes map[string]*node
}

func (e *env) get(obj client.Object) error {
	return e.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
}

func (e *env) mustCreate(t *testing.T, obj client.Object) {
	t.Helper()
	if err := e.c.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %s: %v", obj.GetName(), err)
	}
}

func condStr(conds []metav1.Condition, typ string) string {
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		return "no " + typ + " condition"
	}
	return fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
}

func TestKubernetes(t *testing.T) {
	kenv := kubetest.StartEnv(t, filepath.Join(repo, "deploy", "crds"))
	c, err := client.New(kenv.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	c = client.WithFieldValidation(c, metav1.FieldValidationStrict) // what kubectl apply does
	ctx, cancel := context.WithCancel(context.Background())
	e := &env{c: c, cfg: kenv.Config, nodes: map[string]*node{"node-a": startNode(t, "node-a"), "node-b": startNode(t, "node-b")}}
	// deploy/'s namespace, ServiceAccounts and RBAC, applied for real: the controller below runs
	// as its ServiceAccount (impersonated), so every call it makes is checked against the
	// rights deploy/ ships, as in a cluster.
	for _, f := range []string{"namespace.yaml", "rbac.yaml", "function-invoker.yaml", "tenant-rbac.yaml"} {
		applyManifest(t, c, filepath.Join(repo, "deploy", f))
	}
	for name, n := range e.nodes {
		e.mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sysNS, Name: name + "-token"}, Data: map[string][]byte{"token": []byte(n.token)}})
		e.mustCreate(t, &zygov1.ZygoNode{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: zygov1.ZygoNodeSpec{Address: n.addr, TokenSecretRef: zygov1.SecretRef{Name: name + "-token", Key: "token"}}})
	}

	routec, errc := make(chan string, 1), make(chan error, 1)
	// Warnings reach the test's log as they come; every line (Info too) is kept, and the last
	// of them are printed if the test fails, with each node daemon's (startNode).
	tw := &testWriter{t: t}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controller: last lines of its log:\n%s", tw.tail(120))
		}
	})
	log := slog.New(slog.NewTextHandler(tw, &slog.HandlerOptions{Level: slog.LevelInfo}))
	go func() {
		// The tests' registry and URL servers listen on 127.0.0.1, which the controller refuses
		// as a source address by default: this controller allows exactly that address
		// (--source-allow-cidr 127.0.0.1/32), and the rest of loopback stays refused
		// (TestKubernetes/TenantSources fetches from 127.0.0.2 to show it).
		// The route wants tokens for audience zygo-route, as deploy/controller.yaml says.
		errc <- controller.Run(ctx, controllerConfig(kenv.Config), controller.Config{Namespace: sysNS, RouteListen: "127.0.0.1:0", Log: log,
			RouteAudiences: []string{routeAudience},
			Sources:        controller.SourcePolicy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}},
			RouteReady:     func(a string) { routec <- a }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("controller: %v", err)
		}
	})
	select {
	case a := <-routec:
		e.route = "http://" + a
	case err := <-errc:
		t.Fatalf("controller stopped: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the controller's route did not start within 60s")
	}
	for name := range e.nodes {
		n := &zygov1.ZygoNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
		waitFor(t, 30*time.Second, "ZygoNode "+name+" Ready", func() (bool, string) {
			if err := e.get(n); err != nil {
				return false, err.Error()
			}
			return meta.IsStatusConditionTrue(n.Status.Conditions, zygov1.ConditionReady), condStr(n.Status.Conditions, zygov1.ConditionReady)
		})
	}

	// Each part needs the nodes and the controller; they run in order, sharing them.
	t.Run("Manifests", e.testManifests)
	t.Run("BadInput", e.testBadInput)
	t.Run("Claim", e.testClaim)
	t.Run("CrossNodeFork", e.testCrossNodeFork)
	t.Run("RouteAuth", e.testRouteAuth)
	t.Run("Function", e.testFunction)
	t.Run("OCIFunction", e.testOCIFunction)
	t.Run("TenantSources", e.testTenantSources)
	t.Run("TenantSecretNames", e.testTenantSecretNames)
	t.Run("ForeignAnnotations", e.testForeignAnnotations)
	t.Run("WarmPoolForeignCheckpoint", e.testWarmPoolForeignCheckpoint)
	t.Run("TenantAttacks", e.testTenantAttacks)
	t.Run("Leaks", e.testLeaks)
	t.Run("HungNode", e.testHungNode)
	t.Run("NodeDelete", e.testNodeDelete)
}

// testWriter sends the controller's warnings and errors to the test's log and keeps every
// line it is given (slog writes one record per Write) for tail.
type testWriter struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (w *testWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
		w.t.Log(line)
	}
	w.mu.Lock()
	w.lines = append(w.lines, line)
	w.mu.Unlock()
	return len(p), nil
}

// tail returns the last n lines written, joined by newlines.
func (w *testWriter) tail(n int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines[max(0, len(w.lines)-n):], "\n")
}

// testClaim: a SandboxClaim gets a Sandbox on a node; it runs there; status says where; a
// delete removes it from the node.
func (e *env) testClaim(t *testing.T) {
	ctx := context.Background()
	mem := resource.MustParse("256Mi")
	e.mustCreate(t, &extv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "py"},
		Spec: extv1.SandboxTemplateSpec{Zygo: agentsv1.ZygoSandboxSpec{Limits: agentsv1.Limits{Memory: &mem},
			Env: []agentsv1.EnvVar{{Name: "GREETING", Value: "hello from k8s"}}}}})
	cl := &extv1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c1"},
		Spec: extv1.SandboxClaimSpec{TemplateRef: extv1.SandboxTemplateRef{Name: "py"}}}
	e.mustCreate(t, cl)
	waitFor(t, 2*time.Minute, "claim c1 Ready", func() (bool, string) {
		if err := e.get(cl); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(cl.Status.Conditions, agentsv1.ConditionReady), condStr(cl.Status.Conditions, agentsv1.ConditionReady)
	})
	sb := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: cl.Status.SandboxStatus.Name}}
	if err := e.get(sb); err != nil {
		t.Fatal(err)
	}
	n := e.nodes[sb.Status.NodeName]
	if n == nil || sb.Status.Zygo.SandboxID == "" || sb.Status.Zygo.AgentAddress != n.addr {
		t.Fatalf("Sandbox status %+v: want one of the nodes and the sandbox's id", sb.Status)
	}
	// The sandbox runs on that node: exec in it straight on the agent, as a client would.
	agent := zygo.NewTCPClient(n.addr, n.token)
	var out bytes.Buffer
	st, err := agent.Exec(ctx, sb.Status.Zygo.SandboxID, execBody("sh", "-c", "echo $GREETING"), &out, io.Discard)
	if err != nil || st.Code != 0 || strings.TrimSpace(out.String()) != "hello from k8s" {
		t.Fatalf("exec in the claimed sandbox: %v, %+v, %q", err, st, out.String())
	}
	access := e.accessOf(t, sb)
	for name, other := range e.nodes {
		if name != sb.Status.NodeName {
			if _, err := zygo.NewTCPClient(other.addr, other.token).GetSandbox(ctx, sb.Status.Zygo.SandboxID); !zygo.IsNotFound(err) {
				t.Fatalf("node %s also has the sandbox (%v)", name, err)
			}
		}
	}

	copies := e.forkIt(t, sb, agent)
	// Each copy has an access Secret of its own; the source's token reaches none of them.
	for _, c := range copies {
		if c.token == access.token {
			t.Fatalf("copy %s has the source's access token", c.sandboxID)
		}
		if _, err := access.client.Exec(ctx, c.sandboxID, execBody("true"), io.Discard, io.Discard); !zygo.IsPermissionDenied(err) {
			t.Fatalf("the source's access token on copy %s: %v, want 403", c.sandboxID, err)
		}
	}

	if err := e.c.Delete(ctx, cl); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the claim and its Sandbox gone", func() (bool, string) {
		errClaim, errSb := e.get(cl), e.get(sb)
		return apierrors.IsNotFound(errClaim) && apierrors.IsNotFound(errSb), fmt.Sprintf("claim: %v, sandbox: %v", errClaim, errSb)
	})
	if _, err := agent.GetSandbox(ctx, sb.Status.Zygo.SandboxID); !zygo.IsNotFound(err) {
		t.Fatalf("node %s still has sandbox %s after the delete (%v)", sb.Status.NodeName, sb.Status.Zygo.SandboxID, err)
	}
	waitFor(t, 30*time.Second, "the access Secret gone with its Sandbox", func() (bool, string) {
		err := e.get(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sb.Namespace, Name: access.secret}})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if _, err := access.client.Exec(ctx, sb.Status.Zygo.SandboxID, execBody("true"), io.Discard, io.Discard); !zygo.IsUnauthenticated(err) {
		t.Fatalf("the access token after its Sandbox's delete: %v, want 401", err)
	}

	// A claim with shutdownPolicy Delete is deleted, with its Sandbox, at its shutdownTime
	// (the controller's own delete: deploy/rbac.yaml must allow it).
	// Whole seconds: the API server keeps a metav1.Time to the second.
	shutdown := metav1.NewTime(time.Now().Add(10 * time.Second).Truncate(time.Second))
	exp := &extv1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c-expires"},
		Spec: extv1.SandboxClaimSpec{TemplateRef: extv1.SandboxTemplateRef{Name: "py"},
			Lifecycle: &extv1.ClaimLifecycle{ShutdownTime: &shutdown, ShutdownPolicy: extv1.ClaimShutdownPolicyDelete}}}
	e.mustCreate(t, exp)
	expSb := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: exp.Name}}
	waitFor(t, 10*time.Second, "claim c-expires's Sandbox made", func() (bool, string) {
		err := e.get(expSb)
		return err == nil, fmt.Sprint(err)
	})
	waitFor(t, 90*time.Second, "claim c-expires and its Sandbox deleted at shutdownTime", func() (bool, string) {
		errClaim, errSb := e.get(exp), e.get(expSb)
		return apierrors.IsNotFound(errClaim) && apierrors.IsNotFound(errSb), fmt.Sprintf("claim: %v %s, sandbox: %v", errClaim, condStr(exp.Status.Conditions, agentsv1.ConditionReady), errSb)
	})
	if time.Now().Before(shutdown.Time) {
		t.Fatalf("claim c-expires was deleted before its shutdownTime %v", shutdown)
	}
}

// sandboxAccess is what a Sandbox's access Secret gave.
type sandboxAccess struct {
	secret, token, sandboxID string
	client                   *zygo.Client
}

// accessOf checks sb's access Secret: in sb's namespace, named in its status, owned by it,
// holding a token for sb alone and the agent's address, never the node's token. Its token
// execs in sb on the agent and is refused (403) on create, on the node's tokens and on
// another sandbox of the node.
func (e *env) accessOf(t *testing.T, sb *agentsv1.Sandbox) sandboxAccess {
	t.Helper()
	ctx := context.Background()
	name := sb.Status.Zygo.AccessSecretName
	if name != controller.AccessSecretName(sb.Name) {
		t.Fatalf("Sandbox %s: status.zygo.accessSecretName %q, want %q", sb.Name, name, controller.AccessSecretName(sb.Name))
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sb.Namespace, Name: name}}
	if err := e.get(s); err != nil {
		t.Fatalf("the access Secret of %s: %v", sb.Name, err)
	}
	n := e.nodes[sb.Status.NodeName]
	tok, addr, id := string(s.Data["token"]), string(s.Data["address"]), string(s.Data["sandboxID"])
	if id != sb.Status.Zygo.SandboxID || addr != n.addr || tok == n.token || !strings.HasPrefix(tok, wire.SandboxAccessTokenPrefix+id+"_") ||
		len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != sb.UID {
		t.Fatalf("access Secret %s: %v, owners %v", name, s.Data, s.OwnerReferences)
	}
	c := zygo.NewTCPClient(addr, tok)
	var out bytes.Buffer
	if st, err := c.Exec(ctx, id, execBody("sh", "-c", "echo via the access Secret"), &out, io.Discard); err != nil || st.Code != 0 ||
		strings.TrimSpace(out.String()) != "via the access Secret" {
		t.Fatalf("exec with the access Secret's token: %v %+v %q", err, st, out.String())
	}
	if _, err := c.CreateSandbox(ctx, wire.CreateSandboxBody{Name: "intruder"}); !zygo.IsPermissionDenied(err) {
		t.Fatalf("create with the access token: %v, want 403", err)
	}
	if _, err := c.Tokens(ctx); !zygo.IsPermissionDenied(err) {
		t.Fatalf("listing the node's tokens with the access token: %v, want 403", err)
	}
	// Another sandbox on the same node, made outside Kubernetes with the node's token.
	other, err := zygo.NewTCPClient(n.addr, n.token).CreateSandbox(ctx, wire.CreateSandboxBody{Name: "other-" + sb.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer zygo.NewTCPClient(n.addr, n.token).RemoveSandbox(ctx, other.ID)
	if _, err := c.Exec(ctx, other.ID, execBody("true"), io.Discard, io.Discard); !zygo.IsPermissionDenied(err) {
		t.Fatalf("exec in another sandbox with the access token: %v, want 403", err)
	}
	if err := c.RemoveSandbox(ctx, other.ID); !zygo.IsPermissionDenied(err) {
		t.Fatalf("removing another sandbox with the access token: %v, want 403", err)
	}
	return sandboxAccess{secret: name, token: tok, sandboxID: id, client: c}
}

// testFunction: a Function from a ConfigMap is served through the controller's route, then
// by two nodes.
func (e *env) testFunction(t *testing.T) {
	ctx := context.Background()
	// The Secret reaches the handler as a Zygo secret does: the file /run/secrets/NAME, NAME
	// being the secret's name on the node (per namespace and Secret).
	keyFile := agentsv1.SecretFile{Name: "KEY", SecretKeyRef: agentsv1.SecretKeySelector{Name: "hello-secret", Key: "key"}}
	secretFile := "/run/secrets/" + controller.NodeSecretName("default", keyFile)
	e.mustCreate(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello-code"},
		Data: map[string]string{"main.py": "def handler(event, context):\n    with open(" + fmt.Sprintf("%q", secretFile) + ") as f:\n        return {\"hello\": event.get(\"name\"), \"secret\": f.read()}\n"}})
	e.mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello-secret"}, Data: map[string][]byte{"key": []byte("s3cret")}})
	fn := &zygov1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello"},
		Spec: zygov1.FunctionSpec{Runtime: "python", Handler: "main:handler", Replicas: 1,
			Source:  zygov1.FunctionSource{ConfigMap: &zygov1.ConfigMapSource{Name: "hello-code"}},
			Limits:  zygov1.FunctionLimits{TimeoutMs: 10000},
			Secrets: []agentsv1.SecretFile{keyFile}}}
	e.mustCreate(t, fn)
	waitReplicas := func(n int32) {
		waitFor(t, 3*time.Minute, fmt.Sprintf("Function hello served by %d nodes", n), func() (bool, string) {
			if err := e.get(fn); err != nil {
				return false, err.Error()
			}
			return fn.Status.ReadyReplicas == n && meta.IsStatusConditionTrue(fn.Status.Conditions, zygov1.ConditionReady),
				fmt.Sprintf("%d nodes, %s", fn.Status.ReadyReplicas, condStr(fn.Status.Conditions, zygov1.ConditionReady))
		})
	}
	waitReplicas(1)
	token := e.invokerToken(t, "default")
	invoke := func() string {
		t.Helper()
		var st int
		var node, b string
		waitFor(t, 30*time.Second, "invoke through the route", func() (bool, string) { // a new RoleBinding takes a moment
			st, node, b = e.invokeAs(t, fn.Status.Route, token, `{"name":"k8s"}`)
			return st != http.StatusForbidden, fmt.Sprintf("%d %s", st, b)
		})
		if st != http.StatusOK || !strings.Contains(b, `"hello": "k8s"`) || !strings.Contains(b, `"secret": "s3cret"`) {
			t.Fatalf("invoke through the route: %d %s", st, b)
		}
		return node
	}
	if got := invoke(); got != fn.Status.Nodes[0].Name {
		t.Fatalf("served by %q, want %q", got, fn.Status.Nodes[0].Name)
	}

	patch := client.MergeFrom(fn.DeepCopy())
	fn.Spec.Replicas = 2
	if err := e.c.Patch(ctx, fn, patch); err != nil {
		t.Fatal(err)
	}
	waitReplicas(2)
	seen := map[string]bool{}
	for range 4 {
		seen[invoke()] = true
	}
	if !seen["node-a"] || !seen["node-b"] {
		t.Fatalf("after scaling to 2 the route served from %v, want node-a and node-b", seen)
	}

	// node-b dies: once its probe fails the route serves from node-a alone, and the Function
	// says it has fewer nodes than asked.
	e.nodes["node-b"].T = t // its errors belong to this subtest
	e.nodes["node-b"].Stop(60 * time.Second)
	nb := &zygov1.ZygoNode{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}
	waitFor(t, time.Minute, "ZygoNode node-b not Ready", func() (bool, string) {
		if err := e.get(nb); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionFalse(nb.Status.Conditions, zygov1.ConditionReady), condStr(nb.Status.Conditions, zygov1.ConditionReady)
	})
	for range 3 {
		if got := invoke(); got != "node-a" {
			t.Fatalf("with node-b dead the route served from %q", got)
		}
	}
	waitFor(t, time.Minute, "Function hello says NotEnoughNodes", func() (bool, string) {
		if err := e.get(fn); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(fn.Status.Conditions, zygov1.ConditionReady)
		return c != nil && c.Reason == zygov1.ReasonNotEnoughNodes && fn.Status.ReadyReplicas == 1, condStr(fn.Status.Conditions, zygov1.ConditionReady)
	})

	if err := e.c.Delete(ctx, fn); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "Function hello gone", func() (bool, string) {
		err := e.get(fn)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	for name, n := range e.nodes {
		if !n.Running() {
			continue
		}
		fns, err := zygo.NewTCPClient(n.addr, n.token).Functions(ctx)
		if err != nil || len(fns) != 0 {
			t.Fatalf("node %s still serves %v (%v) after the delete", name, fns, err)
		}
		e.noControllerSecrets(t, name, n)
	}
}

// testBadInput: what the schema refuses, and what the controller reports.
func (e *env) testBadInput(t *testing.T) {
	ctx := context.Background()
	// An unknown field: the structural schema with strict field validation refuses it.
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("agents.x-k8s.io/v1beta1")
	u.SetKind("Sandbox")
	u.SetNamespace("default")
	u.SetName("bad-field")
	_ = unstructured.SetNestedField(u.Object, map[string]any{"spec": map[string]any{}}, "spec", "podTemplate")
	if err := e.c.Create(ctx, u); err == nil || !strings.Contains(err.Error(), `unknown field "spec.podTemplate"`) {
		t.Fatalf("a Sandbox with spec.podTemplate: %v, want the unknown field refused", err)
	}
	// A fork count out of range.
	for _, n := range []int32{0, 17} {
		f := &zygov1.SandboxFork{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("bad-count-%d", n)},
			Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: "x"}, Count: n}}
		if err := e.c.Create(ctx, f); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.count") {
			t.Fatalf("a SandboxFork of count %d: %v, want Invalid naming spec.count", n, err)
		}
	}
	// A Function with two sources.
	fn := &zygov1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "two-sources"},
		Spec: zygov1.FunctionSpec{Runtime: "python", Handler: "main:handler", Source: zygov1.FunctionSource{
			ConfigMap: &zygov1.ConfigMapSource{Name: "a"}, OCI: &zygov1.OCISource{Reference: "r@sha256:00"}}}}
	if err := e.c.Create(ctx, fn); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "exactly one of configMap, url, oci") {
		t.Fatalf("a Function with two sources: %v, want Invalid", err)
	}
	// A claim for a template that does not exist: a condition saying so, and nothing made.
	before := e.sandboxesOnNodes(t)
	cl := &extv1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "orphan"},
		Spec: extv1.SandboxClaimSpec{TemplateRef: extv1.SandboxTemplateRef{Name: "missing"}}}
	e.mustCreate(t, cl)
	waitFor(t, 30*time.Second, "claim orphan says TemplateNotFound", func() (bool, string) {
		if err := e.get(cl); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(cl.Status.Conditions, agentsv1.ConditionReady)
		return c != nil && c.Reason == extv1.ReasonTemplateNotFound && strings.Contains(c.Message, "missing"), condStr(cl.Status.Conditions, agentsv1.ConditionReady)
	})
	var sb agentsv1.Sandbox
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "orphan"}, &sb); !apierrors.IsNotFound(err) {
		t.Fatalf("a Sandbox was made for a claim without a template (%v)", err)
	}
	if after := e.sandboxesOnNodes(t); after != before {
		t.Fatalf("the nodes hold %d sandboxes, were %d", after, before)
	}
	if err := e.c.Delete(ctx, cl); err != nil {
		t.Fatal(err)
	}
	// A node agent that does not answer: a Sandbox pinned to an unreachable ZygoNode says why.
	e.mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sysNS, Name: "dead-token"}, Data: map[string][]byte{"token": []byte("00")}})
	dead := &zygov1.ZygoNode{ObjectMeta: metav1.ObjectMeta{Name: "dead"}, Spec: zygov1.ZygoNodeSpec{Address: freeAddr(t), TokenSecretRef: zygov1.SecretRef{Name: "dead-token"}}}
	e.mustCreate(t, dead)
	waitFor(t, 30*time.Second, "ZygoNode dead not Ready", func() (bool, string) {
		if err := e.get(dead); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(dead.Status.Conditions, zygov1.ConditionReady)
		return c != nil && c.Reason == zygov1.ReasonAgentUnreachable, condStr(dead.Status.Conditions, zygov1.ConditionReady)
	})
	pinned := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pinned"}, Spec: agentsv1.SandboxSpec{NodeName: "dead"}}
	e.mustCreate(t, pinned)
	waitFor(t, 30*time.Second, "Sandbox pinned says NoReadyNode", func() (bool, string) {
		if err := e.get(pinned); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(pinned.Status.Conditions, agentsv1.ConditionReady)
		return c != nil && c.Reason == agentsv1.ReasonNoReadyNode && strings.Contains(c.Message, "dead"), condStr(pinned.Status.Conditions, agentsv1.ConditionReady)
	})
	for _, o := range []client.Object{pinned, dead} {
		if err := e.c.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "Sandbox pinned gone", func() (bool, string) {
		err := e.get(pinned)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// sandboxesOnNodes counts the sandboxes both agents hold.
func (e *env) sandboxesOnNodes(t *testing.T) int {
	t.Helper()
	total := 0
	for name, n := range e.nodes {
		sbs, err := zygo.NewTCPClient(n.addr, n.token).ListSandboxes(context.Background())
		if err != nil {
			t.Fatalf("listing node %s's sandboxes: %v", name, err)
		}
		total += len(sbs)
	}
	return total
}

// testManifests: every object of deploy/ is accepted by the API server (a server-side dry-run
// apply), and kustomization.yaml lists every manifest and every CRD.
func (e *env) testManifests(t *testing.T) {
	dir := filepath.Join(repo, "deploy")
	var k struct {
		Resources []string `json:"resources"`
	}
	kb, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(kb, &k); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, r := range k.Resources {
		listed[r] = true
	}
	crds, _ := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	if len(crds) != 8 {
		t.Fatalf("deploy/crds holds %d CRDs, want 8", len(crds))
	}
	for _, f := range crds {
		if rel := "crds/" + filepath.Base(f); !listed[rel] {
			t.Errorf("kustomization.yaml does not list %s", rel)
		}
	}
	applied := 0
	for _, r := range k.Resources {
		b, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Fatalf("kustomization.yaml lists %s: %v", r, err)
		}
		if strings.HasPrefix(r, "crds/") {
			continue // installed by kubetest already; applying them twice proves nothing
		}
		for i, doc := range bytes.Split(b, []byte("\n---\n")) {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &u.Object); err != nil {
				t.Fatalf("%s document %d: %v", r, i, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			err := e.c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u), client.DryRunAll, client.FieldOwner("zygo-e2e"), client.ForceOwnership)
			if err != nil {
				t.Errorf("%s: %s %s refused by the API server: %v", r, u.GetKind(), u.GetName(), err)
			}
			applied++
		}
	}
	if applied < 9 {
		t.Fatalf("dry-run applied %d objects, want the namespace, RBAC, DaemonSet, Deployment and Service (9)", applied)
	}
}

// execBody is the body of an exec of argv with a 30 s bound.
func execBody(argv ...string) wire.ExecBody { return wire.ExecBody{Argv: argv, TimeoutMs: 30000} }

// forkIt checkpoints sb (a Checkpoint on its node), forks that image two ways (a SandboxFork),
// checks each copy is a Ready Sandbox of its own generation and access Secret on the same node,
// then deletes both and checks the node holds neither the copies nor the image, nor the
// namespace their access Secrets; it returns what those Secrets held.
func (e *env) forkIt(t *testing.T, sb *agentsv1.Sandbox, agent *zygo.Client) []sandboxAccess {
	ctx := context.Background()
	cp := &zygov1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Namespace: sb.Namespace, Name: "cp1"},
		Spec: zygov1.CheckpointSpec{SandboxRef: zygov1.LocalRef{Name: sb.Name}}}
	e.mustCreate(t, cp)
	waitFor(t, 2*time.Minute, "Checkpoint cp1 Ready", func() (bool, string) {
		if err := e.get(cp); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(cp.Status.Conditions, zygov1.ConditionReady), condStr(cp.Status.Conditions, zygov1.ConditionReady)
	})
	if cp.Status.NodeName != sb.Status.NodeName {
		t.Fatalf("the checkpoint is on %q, the sandbox on %q", cp.Status.NodeName, sb.Status.NodeName)
	}
	f := &zygov1.SandboxFork{ObjectMeta: metav1.ObjectMeta{Namespace: sb.Namespace, Name: "f1"},
		Spec: zygov1.SandboxForkSpec{SourceRef: zygov1.LocalRef{Name: sb.Name}, Count: 2, CheckpointRef: &zygov1.LocalRef{Name: "cp1"}}}
	e.mustCreate(t, f)
	waitFor(t, 3*time.Minute, "SandboxFork f1 Complete", func() (bool, string) {
		if err := e.get(f); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(f.Status.Conditions, zygov1.ConditionComplete), condStr(f.Status.Conditions, zygov1.ConditionComplete)
	})
	if f.Status.Succeeded != 2 || len(f.Status.Children) != 2 || f.Status.CheckpointID != cp.Status.CheckpointID {
		t.Fatalf("fork status %+v, want 2 copies of %s", f.Status, cp.Status.CheckpointID)
	}
	gens := map[string]bool{sb.Status.Zygo.Generation: true}
	var copies []*agentsv1.Sandbox
	var accesses []sandboxAccess
	for _, ch := range f.Status.Children {
		c := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: sb.Namespace, Name: ch.Sandbox}}
		waitFor(t, time.Minute, "copy "+ch.Sandbox+" Ready", func() (bool, string) {
			if err := e.get(c); err != nil {
				return false, err.Error()
			}
			return meta.IsStatusConditionTrue(c.Status.Conditions, agentsv1.ConditionReady), condStr(c.Status.Conditions, agentsv1.ConditionReady)
		})
		if c.Status.NodeName != sb.Status.NodeName || c.Status.Zygo.ParentID != sb.Status.Zygo.SandboxID || gens[c.Status.Zygo.Generation] {
			t.Fatalf("copy %s: %+v (source %s, generations so far %v)", c.Name, c.Status, sb.Status.Zygo.SandboxID, gens)
		}
		gens[c.Status.Zygo.Generation] = true
		// Named for the fork and its index (k8s-FORKUID-i): found again by name after a crash.
		if rec, err := agent.GetSandbox(ctx, fmt.Sprintf("k8s-%s-%d", f.UID, ch.Index)); err != nil || rec.ID != ch.SandboxID {
			t.Fatalf("copy %d by its name k8s-%s-%d: %+v, %v; want %s", ch.Index, f.UID, ch.Index, rec, err, ch.SandboxID)
		}
		copies = append(copies, c)
		accesses = append(accesses, e.accessOf(t, c))
	}
	for _, o := range []client.Object{f, cp} {
		if err := e.c.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, time.Minute, "the fork, its copies and the checkpoint gone", func() (bool, string) {
		for _, o := range append([]client.Object{f, cp}, copies[0], copies[1]) {
			if err := e.get(o); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("%s: %v", o.GetName(), err)
			}
		}
		return true, ""
	})
	for _, c := range copies {
		if _, err := agent.GetSandbox(ctx, c.Status.Zygo.SandboxID); !zygo.IsNotFound(err) {
			t.Fatalf("the node still has copy %s (%v)", c.Status.Zygo.SandboxID, err)
		}
	}
	if _, err := agent.GetCheckpoint(ctx, cp.Status.CheckpointID); !zygo.IsNotFound(err) {
		t.Fatalf("the node still has checkpoint %s (%v)", cp.Status.CheckpointID, err)
	}
	for _, a := range accesses {
		if err := e.get(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sb.Namespace, Name: a.secret}}); !apierrors.IsNotFound(err) {
			t.Fatalf("copy's access Secret %s after its delete: %v", a.secret, err)
		}
	}
	return accesses
}
