package controller

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// fakeReviewer knows tokens (token -> user name) and grants (user + " ns/name"); it counts
// its calls. down makes it fail as an API server that does not answer.
type fakeReviewer struct {
	mu      sync.Mutex
	users   map[string]string
	allow   map[string]bool
	down    bool
	authns  int
	authzs  int
	lastSAR string
}

func (f *fakeReviewer) Authenticate(_ context.Context, token string) (authnv1.UserInfo, bool, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.authns++
	if f.down {
		return authnv1.UserInfo{}, false, "", errors.New("connection refused")
	}
	u, ok := f.users[token]
	if !ok {
		return authnv1.UserInfo{}, false, "invalid bearer token", nil
	}
	return authnv1.UserInfo{Username: u}, true, "", nil
}

func (f *fakeReviewer) MayInvoke(_ context.Context, u authnv1.UserInfo, namespace, name string) (bool, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.authzs++
	f.lastSAR = u.Username + " " + namespace + "/" + name
	return f.allow[f.lastSAR], "", nil
}

func (f *fakeReviewer) calls() (int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.authns, f.authzs
}

// postAuth posts body to url with "Authorization: Bearer token" (none when token is "").
func postAuth(url, token, body string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return http.DefaultClient.Do(req)
}

// routeEnv is a Function ns/hello deployed on node a, and a route in front of it with rv.
func routeEnv(t *testing.T, rv Reviewer, now func() time.Time) (*env, string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "code"}, Data: map[string]string{"main.py": "def handler(e, c):\n    return e\n"}}
	fn := &zygov1.Function{ObjectMeta: objMeta("hello"), Spec: zygov1.FunctionSpec{Runtime: "python", Handler: "main:handler",
		Source: zygov1.FunctionSource{ConfigMap: &zygov1.ConfigMapSource{Name: "code"}}, Replicas: 1}}
	e := newEnv(t, cm, fn)
	e.reconcile(&FunctionReconciler{Client: e.c, Dialer: e.agents}, fn)
	rt := &Route{Reader: e.c, Dialer: e.agents, Auth: rv, Now: now}
	srv := httptest.NewServer(rt.Handler())
	t.Cleanup(srv.Close)
	return e, srv.URL + RoutePath("ns", "hello")
}

// answer posts to url and returns the status, the error body's message (if any) and the body.
func answer(t *testing.T, url, token string) (int, string, string) {
	t.Helper()
	resp, err := postAuth(url, token, `{"x":1}`)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var eb wire.ErrorBody
	_ = json.Unmarshal(b, &eb)
	if resp.StatusCode == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("a 401 without WWW-Authenticate")
	}
	return resp.StatusCode, eb.Message, string(b)
}

// TestRouteAuthenticatesAndAuthorises: no token and an unknown token are 401, a user without
// the grant is 403 naming the permission, a user with it gets the Function's answer; nothing
// reaches a node before the caller is allowed.
func TestRouteAuthenticatesAndAuthorises(t *testing.T) {
	rv := &fakeReviewer{users: map[string]string{"good": "alice", "other": "bob"}, allow: map[string]bool{"alice ns/hello": true}}
	e, url := routeEnv(t, rv, nil)
	for _, c := range []struct {
		token  string
		status int
		msg    string
	}{
		{"", http.StatusUnauthorized, "no bearer token"},
		{"forged", http.StatusUnauthorized, "not valid: invalid bearer token"},
		{"other", http.StatusForbidden, `user "bob" may not create functions/invoke (group zygo.run) of Function ns/hello`},
		{"good", http.StatusOK, ""},
	} {
		st, msg, body := answer(t, url, c.token)
		if st != c.status || !strings.Contains(msg, c.msg) {
			t.Errorf("token %q: %d %q, want %d with %q", c.token, st, body, c.status, c.msg)
		}
		if st == http.StatusOK && !strings.Contains(body, `"event":{"x":1}`) {
			t.Errorf("token %q: body %s, want the function's answer", c.token, body)
		}
	}
	if got := e.agents["a"].invokes + e.agents["b"].invokes; got != 1 {
		t.Fatalf("the nodes served %d invokes, want 1 (only the allowed one)", got)
	}
	// A Basic header is no bearer token.
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("{}"))
	req.SetBasicAuth("alice", "good")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("basic auth: %d, want 401", resp.StatusCode)
	}
}

// TestRouteAuthCache: a decision is reused for AuthTTL per token and Function (the reviewer is
// asked once), asked again after it, and never reused for another Function; an API server
// that does not answer is 503 and is not cached.
func TestRouteAuthCache(t *testing.T) {
	rv := &fakeReviewer{users: map[string]string{"good": "alice"}, allow: map[string]bool{"alice ns/hello": true}}
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	_, url := routeEnv(t, rv, clock)
	for range 5 {
		if st, _, body := answer(t, url, "good"); st != http.StatusOK {
			t.Fatalf("invoke: %d %s", st, body)
		}
	}
	if n, z := rv.calls(); n != 1 || z != 1 {
		t.Fatalf("reviews after 5 invokes: %d TokenReviews, %d SubjectAccessReviews; want 1 and 1", n, z)
	}
	// Another Function with the same token is its own decision (a 404 after it is allowed).
	rv.mu.Lock()
	rv.allow["alice ns/other"] = true
	rv.mu.Unlock()
	if st, _, body := answer(t, strings.Replace(url, "/hello/", "/other/", 1), "good"); st != http.StatusNotFound {
		t.Fatalf("invoke of ns/other: %d %s, want 404", st, body)
	}
	if _, z := rv.calls(); z != 2 || rv.lastSAR != "alice ns/other" {
		t.Fatalf("SubjectAccessReviews %d (last %q), want a second one for ns/other", z, rv.lastSAR)
	}
	// The grant goes; the cached decision holds until the TTL passes, then the refusal shows.
	rv.mu.Lock()
	delete(rv.allow, "alice ns/hello")
	rv.mu.Unlock()
	if st, _, _ := answer(t, url, "good"); st != http.StatusOK {
		t.Fatalf("within the TTL: %d, want the cached 200", st)
	}
	mu.Lock()
	now = now.Add(DefaultAuthCacheTTL)
	mu.Unlock()
	if st, _, body := answer(t, url, "good"); st != http.StatusForbidden {
		t.Fatalf("after the TTL: %d %s, want 403", st, body)
	}
	// The API server does not answer: 503, and the next request asks again.
	mu.Lock()
	now = now.Add(DefaultAuthCacheTTL)
	mu.Unlock()
	rv.mu.Lock()
	rv.down = true
	rv.mu.Unlock()
	for range 2 {
		if st, msg, _ := answer(t, url, "good"); st != http.StatusServiceUnavailable || !strings.Contains(msg, "connection refused") {
			t.Fatalf("API server down: %d %q, want 503", st, msg)
		}
	}
	if n, _ := rv.calls(); n != 5 { // hello, other, hello after the TTL, then the two failures
		t.Fatalf("TokenReviews %d, want 5 (failures are not cached)", n)
	}
}

// TestRouteAuthCacheBounded: each cache never holds more than its bound, and drops its least
// recently used entry first.
func TestRouteAuthCacheBounded(t *testing.T) {
	c := newDecisionLRU(3)
	now := time.Now()
	d := authDecision{status: 401, expires: now.Add(time.Minute)}
	for i := range 10 {
		c.put([32]byte{byte(i)}, d)
		if c.len() > 3 {
			t.Fatalf("after %d stores the cache holds %d, bound 3", i+1, c.len())
		}
		if i == 8 {
			c.get([32]byte{6}, now) // 6, the oldest, is used: 7 goes before it
		}
	}
	for k, want := range map[byte]bool{6: true, 8: true, 9: true, 7: false, 0: false} {
		if _, ok := c.get([32]byte{k}, now); ok != want {
			t.Errorf("entry %d cached %v, want %v", k, ok, want)
		}
	}
	if _, ok := c.get([32]byte{9}, now.Add(time.Minute)); ok {
		t.Error("an expired entry was returned")
	}
}

// TestRouteWithoutReviewerRefuses: a Route with no Reviewer refuses every invoke.
func TestRouteWithoutReviewerRefuses(t *testing.T) {
	_, url := routeEnv(t, nil, nil)
	if st, msg, _ := answer(t, url, "anything"); st != http.StatusUnauthorized || !strings.Contains(msg, "no token reviewer") {
		t.Fatalf("%d %q, want 401", st, msg)
	}
}
