package controller

// Regression tests of attack-k's findings (a hostile tenant against the controller): node
// secret and function names that collide across namespaces, OCI manifests that exhaust the
// controller's memory, sources that reach internal addresses and reflect their answers, and
// the route's review flood.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	zsecret "github.com/zygo-run/zygo/internal/secret"
)

// allowLoopback is the source policy of unit tests whose registries and URL servers are
// httptest servers on loopback, which the default policy refuses.
var allowLoopback = &SourcePolicy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}

// loopbackFetchClient fetches sources from loopback test servers.
var loopbackFetchClient = newFetchClient(fetchHeaderTimeout, allowLoopback)

// TestRouteAuthBogusTokensKeepGoodDecisions: a flood of distinct bogus tokens (attack-k:
// each an uncached TokenReview, and past 10,000 entries the old single cache evicted arbitrary
// decisions, valid callers' too) leaves a valid caller's cached allowance in place: refusals
// have their own cache. On the old code the second "good" invoke made a second TokenReview.
func TestRouteAuthBogusTokensKeepGoodDecisions(t *testing.T) {
	rv := &fakeReviewer{users: map[string]string{"good": "alice"}, allow: map[string]bool{"alice ns/hello": true}}
	now := time.Now()
	a := newRouteAuth(rv, time.Minute, 8, func() time.Time { return now }, 1e6, 1e6, 4)
	req := func(token string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/functions/ns/hello/invoke", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		return r
	}
	if st, msg := a.check(req("good"), "ns", "hello"); st != 0 {
		t.Fatalf("good: %d %s", st, msg)
	}
	for i := range 100 {
		if st, _ := a.check(req(fmt.Sprintf("bogus-%d", i)), "ns", "hello"); st != http.StatusUnauthorized {
			t.Fatalf("bogus token %d: %d, want 401", i, st)
		}
	}
	if a.refused.len() > 8 || a.allowed.len() != 1 {
		t.Fatalf("caches hold %d refusals (bound 8) and %d allowances (want 1)", a.refused.len(), a.allowed.len())
	}
	if st, msg := a.check(req("good"), "ns", "hello"); st != 0 {
		t.Fatalf("good after the flood: %d %s", st, msg)
	}
	if n, _ := rv.calls(); n != 101 {
		t.Fatalf("TokenReviews %d, want 101: the good caller's decision was evicted by the flood", n)
	}
}

// TestRouteAuthReviewLimit: reviews of uncached tokens are bounded per second; past the bound
// the caller gets 429 and the API server is not asked; a cached caller is not limited. On the
// old code every request made a TokenReview.
func TestRouteAuthReviewLimit(t *testing.T) {
	rv := &fakeReviewer{users: map[string]string{"good": "alice"}, allow: map[string]bool{"alice ns/hello": true}}
	now := time.Now()
	a := newRouteAuth(rv, time.Minute, 100, func() time.Time { return now }, 5, 5, 4)
	req := func(token string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/functions/ns/hello/invoke", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		return r
	}
	if st, _ := a.check(req("good"), "ns", "hello"); st != 0 {
		t.Fatalf("good: %d", st)
	}
	var limited int
	for i := range 20 {
		switch st, msg := a.check(req(fmt.Sprintf("bogus-%d", i)), "ns", "hello"); st {
		case http.StatusTooManyRequests:
			limited++
			if !strings.Contains(msg, "retry") {
				t.Fatalf("429 says %q", msg)
			}
		case http.StatusUnauthorized:
		default:
			t.Fatalf("bogus token: %d %s", st, msg)
		}
	}
	if n, _ := rv.calls(); n != 5 || limited != 16 {
		t.Fatalf("%d TokenReviews and %d answers 429 for 20 bogus tokens at one instant, want 5 (the burst, the good one included) and 16", n, limited)
	}
	if st, _ := a.check(req("good"), "ns", "hello"); st != 0 {
		t.Fatalf("a cached caller is limited: %d", st)
	}
	now = now.Add(time.Second) // 5 more reviews
	if st, _ := a.check(req("bogus-next"), "ns", "hello"); st != http.StatusUnauthorized {
		t.Fatalf("a second later: %d, want a review (401)", st)
	}
}

// TestRouteAuthReviewsInFlight: past the bound on reviews under way at once, an uncached caller
// gets 429 with Retry-After (through the route's handler) without waiting for them. With a
// bound of 4 one address holds at most 1 (its share): the second from 127.0.0.1 is refused.
func TestRouteAuthReviewsInFlight(t *testing.T) {
	block := make(chan struct{})
	rv := &blockingReviewer{block: block}
	rt := &Route{Auth: rv, AuthReviewsInFlight: 4, AuthReviewsPerSecond: 1e6, AuthReviewsBurst: 1e6}
	srv := httptest.NewServer(rt.Handler())
	defer srv.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp, err := postAuth(srv.URL+RoutePath("ns", "hello"), "slow", "{}")
		if err == nil {
			resp.Body.Close()
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for rv.started.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := postAuth(srv.URL+RoutePath("ns", "hello"), "second", "{}")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	close(block)
	wg.Wait()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("second uncached caller from an address with its share under way: %d Retry-After %q, want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// blockingReviewer's Authenticate waits for block; it refuses every token.
type blockingReviewer struct {
	block   chan struct{}
	started atomic.Int32
}

func (b *blockingReviewer) Authenticate(ctx context.Context, _ string) (authnv1.UserInfo, bool, string, error) {
	b.started.Add(1)
	select {
	case <-b.block:
	case <-ctx.Done():
	}
	return authnv1.UserInfo{}, false, "no", nil
}

func (b *blockingReviewer) MayInvoke(context.Context, authnv1.UserInfo, string, string) (bool, string, error) {
	return false, "", nil
}

// TestRouteServerReadTimeout: the route's server drops a request whose body does not arrive
// within routeReadTimeout (attack-k: only ReadHeaderTimeout was set, so a slow body held a
// connection as long as it liked). On the old code the connection stayed open.
func TestRouteServerReadTimeout(t *testing.T) {
	old := routeReadTimeout
	routeReadTimeout = 300 * time.Millisecond
	defer func() { routeReadTimeout = old }()
	ctx, cancel := context.WithCancel(context.Background())
	addrc, done := make(chan string, 1), make(chan error, 1)
	rt := &Route{Auth: &fakeReviewer{}}
	go func() {
		done <- routeRunnable("127.0.0.1:0", rt.Handler(), slog.New(slog.DiscardHandler), func(a string) { addrc <- a })(ctx)
	}()
	defer func() { cancel(); <-done }()
	c, err := net.Dial("tcp", <-addrc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /functions/ns/hello/invoke HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	_, err = io.Copy(io.Discard, c) // until the server closes the connection
	if err != nil {
		t.Fatalf("the connection with a stalled body was not closed within 10s: %v", err)
	}
	t.Logf("closed after %v", time.Since(start))
}

// Node names of attack-k's birthday search: the old NodeSecretName (32 bits of sha256) gave
// both SecretFiles "db" the node name k8sfed261b9_db, and tenant-a's Function read victim's
// password through it.
const (
	collVictimSecret = "creds-130640"
	collTenantSecret = "x-20860"
)

// TestNodeSecretNamesDoNotCollide: the names attack-k found colliding differ, the hash part
// has 128 bits, the longest name fits the daemon's pattern, and the collection recognises new
// and old names. On the old code the first check failed (both k8sfed261b9_db).
func TestNodeSecretNamesDoNotCollide(t *testing.T) {
	tf := agentsv1.SecretFile{Name: "db", SecretKeyRef: agentsv1.SecretKeySelector{Name: collTenantSecret, Key: "password"}}
	vf := agentsv1.SecretFile{Name: "db", SecretKeyRef: agentsv1.SecretKeySelector{Name: collVictimSecret, Key: "password"}}
	tn, vn := NodeSecretName("tenant-a", tf), NodeSecretName("victim", vf)
	if tn == vn {
		t.Fatalf("tenant-a/%s/password and victim/%s/password share the node secret %s", collTenantSecret, collVictimSecret, tn)
	}
	pat := regexp.MustCompile(`^` + zsecret.NamePattern + `$`)
	long := agentsv1.SecretFile{Name: "A" + strings.Repeat("b", 100), SecretKeyRef: agentsv1.SecretKeySelector{Name: strings.Repeat("s", 253), Key: "k"}}
	for _, n := range []string{tn, vn, NodeSecretName(strings.Repeat("n", 63), long)} {
		if !pat.MatchString(n) {
			t.Errorf("node secret name %q (%d characters) does not match the daemon's pattern %s", n, len(n), zsecret.NamePattern)
		}
		if h := strings.TrimPrefix(n[:strings.IndexByte(n, '_')], "k8s"); len(h) != nodeSecretHashLen || float64(len(h))*math.Log2(62) < 128 {
			t.Errorf("hash part %q of %s: %d characters of base 62, want 128 bits", h, n, len(h))
		}
		if !nodeSecretRE.MatchString(n) {
			t.Errorf("the collection does not recognise %s", n)
		}
	}
	if !nodeSecretRE.MatchString("k8sfed261b9_db") {
		t.Error("the collection does not recognise the old form k8sfed261b9_db (an upgrade leaves them)")
	}
	if nodeSecretRE.MatchString("k8s_mine") || nodeSecretRE.MatchString("db_password") {
		t.Error("the collection claims a node's own secret")
	}
}

// TestPushSecretsRefusesAnotherSourcesName: when two sources do share a node name (forced
// here: every hash the same), the second never overwrites the first's value on the node; its
// object gets SecretNotFound naming the field.
func TestPushSecretsRefusesAnotherSourcesName(t *testing.T) {
	old := secretSourceHash
	secretSourceHash = func(string) string { return strings.Repeat("0", nodeSecretHashLen) }
	defer func() { secretSourceHash = old }()
	vf := agentsv1.SecretFile{Name: "db", SecretKeyRef: agentsv1.SecretKeySelector{Name: "creds", Key: "password"}}
	tf := agentsv1.SecretFile{Name: "db", SecretKeyRef: agentsv1.SecretKeySelector{Name: "x", Key: "password"}}
	victim := &agentsv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "victim", Name: "db-user"},
		Spec: agentsv1.SandboxSpec{Zygo: agentsv1.ZygoSandboxSpec{Secrets: []agentsv1.SecretFile{vf}}}}
	tenant := &zygov1.Function{ObjectMeta: objMeta("steal"), Spec: zygov1.FunctionSpec{Secrets: []agentsv1.SecretFile{tf}}}
	e := newEnv(t, victim, tenant, secret("x", "password", "tenant-value"),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "victim", Name: "creds"}, Data: map[string][]byte{"password": []byte("VICTIM")}})
	a := e.agents["a"]
	_, err := pushSecrets(context.Background(), e.c, a, "ns", tenant.Spec.Secrets, "spec.secrets")
	var snf *errSecretNotFound
	if !errors.As(err, &snf) || !strings.Contains(err.Error(), "spec.secrets[0]") {
		t.Fatalf("pushing a colliding secret: %v, want errSecretNotFound naming spec.secrets[0]", err)
	}
	if _, err := pushSecrets(context.Background(), e.c, a, "victim", victim.Spec.Zygo.Secrets, "spec.zygo.secrets"); err == nil {
		t.Fatal("the victim's push succeeded while another namespace names the same node secret: either may be first on the node")
	}
	if len(a.secrets) != 0 {
		t.Fatalf("the agent stores %v", a.secrets)
	}
	t.Logf("refused: %v", err)
}

// TestNodeFunctionNamesDoNotCollide: a Function's node name carries 128 bits of the hash and
// fits the agents' pattern; "team"/"prod-x" and "team-prod"/"x" (one readable part) differ.
// On the old code the hash part was 8 hex digits (32 bits).
func TestNodeFunctionNamesDoNotCollide(t *testing.T) {
	pat := regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	a, b := nodeFunctionName("team", "prod-x"), nodeFunctionName("team-prod", "x")
	if a == b {
		t.Fatalf("two namespaces share the function name %s", a)
	}
	for _, n := range []string{a, b, nodeFunctionName(strings.Repeat("n", 63), strings.Repeat("f.", 126)+"f")} {
		if !pat.MatchString(n) {
			t.Errorf("%q (%d characters) does not fit the agents' pattern", n, len(n))
		}
		h := n[strings.LastIndexByte(n, '-')+1:]
		if float64(len(h))*math.Log2(36) < 128 {
			t.Errorf("hash part %q of %s has fewer than 128 bits", h, n)
		}
	}
	if legacyNodeFunctionName("team", "prod-x") == a {
		t.Error("the legacy name is the new one")
	}
}

// internalService is a loopback HTTP service standing in for one only the cluster reaches (a
// metadata endpoint, an admin API): it answers every request 403 with body, and counts them.
func internalService(t *testing.T, body string) (string, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), &hits
}

// urlFunction is a Function of ns whose source is url.
func urlFunction(url string) *zygov1.Function {
	return &zygov1.Function{ObjectMeta: objMeta("fn"), Spec: zygov1.FunctionSpec{Runtime: "python", Handler: "main:handler", Replicas: 1,
		Source: zygov1.FunctionSource{URL: &zygov1.URLSource{URL: url, SHA256: strings.Repeat("0", 64)}}}}
}

// TestSourceErrorsCarryNoBody: an OCI or URL source on a service that answers 403 with a
// secret body leaves the status line in the Function's condition, never the body (attack-k:
// go-containerregistry's error carried the body, and the condition carried the error). On the
// old code the OCI case failed.
func TestSourceErrorsCarryNoBody(t *testing.T) {
	const body = "INTERNAL-ONLY-aws-secret-access-key=AKIA1234SECRET"
	addr, hits := internalService(t, body)
	for _, fn := range []*zygov1.Function{ociFunction(addr+"/latest/meta-data:iam", nil), urlFunction("http://" + addr + "/latest/meta-data/iam")} {
		e := newEnv(t, fn)
		e.reconcile(&FunctionReconciler{Client: e.c, Dialer: e.agents, HTTP: loopbackFetchClient}, fn)
		e.get(fn)
		c := condition(t, fn.Status.Conditions, zygov1.ConditionReady)
		if c.Reason != zygov1.ReasonSourceFailed || !strings.Contains(c.Message, "403") || !strings.Contains(c.Message, "spec.source") {
			t.Errorf("Ready = %+v, want SourceFailed naming spec.source and 403", c)
		}
		if strings.Contains(c.Message, "AKIA") {
			t.Errorf("the condition carries the service's body: %s", c.Message)
		}
		t.Logf("%s", c.Message)
	}
	if hits.Load() == 0 {
		t.Fatal("the service was never reached: the test shows nothing")
	}
}

// TestSourceAddressPolicy: by default a source on loopback (by address or by a name that
// resolves to it), link-local (the cloud metadata address) or unspecified is refused at dial
// time, with a condition naming the field and the address, and nothing is sent to it; the
// operator's allow list lets loopback through and its deny list refuses more. On the old code
// the controller fetched from every address.
func TestSourceAddressPolicy(t *testing.T) {
	addr, hits := internalService(t, "secret")
	_, port, _ := net.SplitHostPort(addr)
	for ref, says := range map[string]string{
		"oci " + addr + "/x:v1":                            "127.0.0.1",
		"oci localhost:" + port + "/x:v1":                  "is refused (loopback)",
		"url http://" + addr + "/x.tgz":                    "127.0.0.1",
		"url http://169.254.169.254/latest/meta-data/iam":  "169.254.169.254 is refused (link-local",
		"url http://[::ffff:127.0.0.1]:" + port + "/x.tgz": "127.0.0.1",
		"oci 0.0.0.0:" + port + "/x:v1":                    "0.0.0.0 is refused (unspecified)",
	} {
		kind, src, _ := strings.Cut(ref, " ")
		fn := urlFunction(src)
		field := "spec.source.url"
		if kind == "oci" {
			fn, field = ociFunction(src, nil), "spec.source.oci.reference"
		}
		e := newEnv(t, fn)
		e.reconcile(&FunctionReconciler{Client: e.c, Dialer: e.agents}, fn) // the default policy
		e.get(fn)
		c := condition(t, fn.Status.Conditions, zygov1.ConditionReady)
		if c.Reason != zygov1.ReasonSourceFailed || !strings.Contains(c.Message, field) || !strings.Contains(c.Message, says) {
			t.Errorf("%s: Ready = %+v, want SourceFailed naming %s and saying %q", ref, c, field, says)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the loopback service was reached %d times under the default policy", n)
	}
	// A redirect is a dial like any other: from an allowed server to a refused address.
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	inner := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1); w.WriteHeader(http.StatusForbidden) }),
		ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = inner.Serve(l) }()
	defer inner.Close()
	hop := httptest.NewServer(http.RedirectHandler("http://"+l.Addr().String()+"/meta", http.StatusFound))
	defer hop.Close()
	only1 := newFetchClient(fetchHeaderTimeout, &SourcePolicy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	fn := urlFunction(hop.URL + "/x.tgz")
	e := newEnv(t, fn)
	e.reconcile(&FunctionReconciler{Client: e.c, Dialer: e.agents, HTTP: only1}, fn)
	e.get(fn)
	if c := condition(t, fn.Status.Conditions, zygov1.ConditionReady); !strings.Contains(c.Message, "address 127.0.0.2 is refused (loopback)") {
		t.Errorf("a redirect to 127.0.0.2 with only 127.0.0.1 allowed: Ready = %+v", c)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the refused services were reached %d times", n)
	}
	p := &SourcePolicy{Allow: allowLoopback.Allow, Deny: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	for a, ok := range map[string]bool{"127.0.0.1": true, "::1": true, "10.1.2.3": false, "169.254.169.254": false, "8.8.8.8": true, "::ffff:10.0.0.1": false} {
		if err := p.check(netip.MustParseAddr(a)); (err == nil) != ok {
			t.Errorf("policy allow loopback, deny 10/8: %s allowed %v, want %v (%v)", a, err == nil, ok, err)
		}
	}
	if _, err := ParseCIDRs("--source-allow-cidr", []string{"10.0.0.0/8", "192.168.1.1", "nope"}); err == nil || !strings.Contains(err.Error(), "--source-allow-cidr \"nope\"") {
		t.Fatalf("ParseCIDRs of a bad value: %v", err)
	}
}

// hugeManifestRegistry answers every manifest request with size bytes of a valid-looking
// manifest (with Content-Length when withLength, else chunked) and reports the bytes it wrote.
func hugeManifestRegistry(t *testing.T, size int, withLength bool) (string, *atomic.Int64) {
	t.Helper()
	var wrote atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			return
		}
		if !strings.Contains(r.URL.Path, "/manifests/") {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		if withLength {
			w.Header().Set("Content-Length", fmt.Sprint(size))
		}
		if r.Method == http.MethodHead {
			return
		}
		const d = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
		elem := `{"mediaType":"application/vnd.oci.image.layer.v1.tar","size":1,"digest":"` + d + `"}`
		head := `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","size":2,"digest":"` + d + `"},"layers":[`
		chunk := strings.Repeat(elem+",", (1<<20)/(len(elem)+1))
		n, _ := io.WriteString(w, head)
		left := size - n - len(elem) - 2
		for left > len(chunk) {
			m, err := io.WriteString(w, chunk)
			wrote.Add(int64(m))
			if err != nil {
				return
			}
			left -= len(chunk)
		}
		_, _ = io.WriteString(w, strings.Repeat(" ", left)+elem+"]}")
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), &wrote
}

// TestOCIManifestBounded: a 99 MiB manifest (go-containerregistry's own bound is 100 MiB;
// attack-k's grew the controller's heap by 800 MiB) is refused by its Content-Length before
// it is read, and one without a Content-Length once maxManifestBytes have been read. On the
// old code both were read whole and parsed.
func TestOCIManifestBounded(t *testing.T) {
	for _, withLength := range []bool{true, false} {
		addr, wrote := hugeManifestRegistry(t, 99<<20, withLength)
		fn := ociFunction(addr+"/huge/m:latest", nil)
		e := newEnv(t, fn)
		e.reconcile(&FunctionReconciler{Client: e.c, Dialer: e.agents, HTTP: loopbackFetchClient}, fn)
		e.get(fn)
		c := condition(t, fn.Status.Conditions, zygov1.ConditionReady)
		want := fmt.Sprintf("the manifest is larger than %d bytes", maxManifestBytes)
		if c.Reason != zygov1.ReasonSourceFailed || !strings.Contains(c.Message, want) || !strings.Contains(c.Message, "spec.source.oci.reference") {
			t.Errorf("Content-Length %v: Ready = %+v, want SourceFailed saying %q", withLength, c, want)
		}
		// The server may get ahead of the reader by what the connection buffers, not by 99 MiB.
		if n := wrote.Load(); n > 32<<20 {
			t.Errorf("Content-Length %v: the registry wrote %d MiB of the manifest before the controller stopped reading", withLength, n>>20)
		}
	}
}
