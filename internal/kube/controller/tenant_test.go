package controller

// Regression tests of attack-k's findings (a hostile tenant against the controller): node
// secret and function names that collide across namespaces, OCI manifests that exhaust the
// controller's memory, sources that reach internal addresses and reflect their answers, and
// the route's review flood.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
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
// gets 429 with Retry-After (through the route's handler) without waiting for them.
func TestRouteAuthReviewsInFlight(t *testing.T) {
	block := make(chan struct{})
	rv := &blockingReviewer{block: block}
	rt := &Route{Auth: rv, AuthReviewsInFlight: 2, AuthReviewsPerSecond: 1e6, AuthReviewsBurst: 1e6}
	srv := httptest.NewServer(rt.Handler())
	defer srv.Close()
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := postAuth(srv.URL+RoutePath("ns", "hello"), fmt.Sprintf("slow-%d", i), "{}")
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for rv.started.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := postAuth(srv.URL+RoutePath("ns", "hello"), "third", "{}")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	close(block)
	wg.Wait()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third uncached caller with 2 reviews under way: %d Retry-After %q, want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
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
