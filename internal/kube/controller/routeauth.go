package controller

import (
	"container/list"
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// The permission a route caller needs, in RBAC terms: verb create on the subresource
// functions/invoke (group zygo.run) of the Function, in its namespace. deploy/rbac.yaml has
// ClusterRole zygo-function-invoker granting it; bind it with a RoleBinding per namespace.
const (
	InvokeVerb        = "create"
	InvokeResource    = "functions"
	InvokeSubresource = "invoke"
)

// Reviewer asks the API server who a bearer token is and what that user may do. The route
// calls it only on a cache miss (routeAuth). Both methods are safe for concurrent use.
type Reviewer interface {
	// Authenticate returns the user token belongs to. ok is false, with the API server's
	// reason, when the token is not valid (expired, revoked, of a deleted ServiceAccount,
	// not a token); err is for an API server that could not answer.
	Authenticate(ctx context.Context, token string) (user authnv1.UserInfo, ok bool, reason string, err error)
	// MayInvoke reports whether user may create functions/invoke of Function namespace/name;
	// reason is the authorizer's, when it gives one. err is for an API server that could
	// not answer.
	MayInvoke(ctx context.Context, user authnv1.UserInfo, namespace, name string) (allowed bool, reason string, err error)
}

// APIReviewer is the Reviewer of a real cluster: a TokenReview (authentication.k8s.io/v1)
// authenticates, a SubjectAccessReview (authorization.k8s.io/v1) authorises. The controller's
// ServiceAccount needs create on both (deploy/rbac.yaml).
type APIReviewer struct {
	// Client creates the reviews; its scheme knows authentication/v1 and authorization/v1
	// (NewAPIReviewer makes one).
	Client client.Client
	// Audiences, if set, are the audiences a token must be for (TokenReview spec.audiences);
	// empty: the API server's own.
	Audiences []string
}

var _ Reviewer = (*APIReviewer)(nil)

// NewAPIReviewer returns an APIReviewer with a client of its own for rc.
func NewAPIReviewer(rc *rest.Config, audiences []string) (*APIReviewer, error) {
	s := runtime.NewScheme()
	utilruntime.Must(authnv1.AddToScheme(s))
	utilruntime.Must(authzv1.AddToScheme(s))
	c, err := client.New(rc, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("making the review client: %w", err)
	}
	return &APIReviewer{Client: c, Audiences: audiences}, nil
}

// Authenticate implements Reviewer with a TokenReview.
func (r *APIReviewer) Authenticate(ctx context.Context, token string) (authnv1.UserInfo, bool, string, error) {
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: r.Audiences}}
	if err := r.Client.Create(ctx, tr); err != nil {
		return authnv1.UserInfo{}, false, "", fmt.Errorf("creating a TokenReview: %w", err)
	}
	if !tr.Status.Authenticated {
		reason := tr.Status.Error
		if reason == "" {
			reason = "the API server does not know it"
		}
		return authnv1.UserInfo{}, false, reason, nil
	}
	return tr.Status.User, true, "", nil
}

// MayInvoke implements Reviewer with a SubjectAccessReview.
func (r *APIReviewer) MayInvoke(ctx context.Context, u authnv1.UserInfo, namespace, name string) (bool, string, error) {
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups,
		ResourceAttributes: &authzv1.ResourceAttributes{Namespace: namespace, Verb: InvokeVerb, Group: zygov1.GroupVersion.Group,
			Resource: InvokeResource, Subresource: InvokeSubresource, Name: name},
	}}
	if len(u.Extra) > 0 {
		sar.Spec.Extra = make(map[string]authzv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			sar.Spec.Extra[k] = authzv1.ExtraValue(v)
		}
	}
	if err := r.Client.Create(ctx, sar); err != nil {
		return false, "", fmt.Errorf("creating a SubjectAccessReview: %w", err)
	}
	reason := sar.Status.Reason
	if sar.Status.EvaluationError != "" {
		reason = strings.TrimSpace(reason + " " + sar.Status.EvaluationError)
	}
	return sar.Status.Allowed && !sar.Status.Denied, reason, nil
}

// Defaults of the route's decision cache and of its reviews.
const (
	// DefaultAuthCacheTTL is how long the route keeps a decision about a token and a Function:
	// a revoked RoleBinding, a deleted ServiceAccount or an expired token still invokes for
	// at most this long.
	DefaultAuthCacheTTL = 10 * time.Second
	// DefaultAuthCacheEntries bounds each of the two caches, allowances and refusals: past
	// it, the least recently used entry of that cache goes. Refusals never evict allowances,
	// so a flood of bogus tokens costs valid callers nothing.
	DefaultAuthCacheEntries = 10000
	// DefaultAuthReviewsPerSecond and DefaultAuthReviewsBurst bound the reviews (a
	// TokenReview, then a SubjectAccessReview) the route starts for tokens not in its cache,
	// per client address (clientKey): one source spends its own budget, never another's.
	// DefaultAuthReviewsInFlight bounds the reviews under way at once, all clients together,
	// and one address may hold at most a quarter of them (at least 1). Past any bound, an
	// uncached caller is answered 429 with Retry-After, and the API server is not asked.
	DefaultAuthReviewsPerSecond = 50
	DefaultAuthReviewsBurst     = 100
	DefaultAuthReviewsInFlight  = 16
	// DefaultAuthClients bounds the client addresses whose budgets are kept: past it, the
	// least recently seen address's budget goes (it starts full again when it comes back).
	DefaultAuthClients = 10000
)

// routeAuth decides whether a request may invoke a Function, caching decisions per (token,
// Function) for ttl: allowances and refusals in two LRU caches of max entries each. The key is
// the sha256 of the token and the target: the cache holds no token. Reviews of uncached
// tokens are bounded per client address (a rate and a share of the in-flight bound: clients)
// and, all clients together, by inflight (at once).
type routeAuth struct {
	reviewer Reviewer
	ttl      time.Duration
	max      int
	now      func() time.Time
	inflight chan struct{} // a slot per review under way; its capacity is the bound
	clients  *clientBudgets

	mu      sync.Mutex // guards allowed and refused
	allowed *decisionLRU
	refused *decisionLRU
}

// newRouteAuth returns a routeAuth with its caches and bounds; perSecond, burst and inflight
// of 0 take the defaults.
func newRouteAuth(rv Reviewer, ttl time.Duration, max int, now func() time.Time, perSecond float64, burst, inflight int) *routeAuth {
	if ttl <= 0 {
		ttl = DefaultAuthCacheTTL
	}
	if max <= 0 {
		max = DefaultAuthCacheEntries
	}
	if now == nil {
		now = time.Now
	}
	if perSecond <= 0 {
		perSecond = DefaultAuthReviewsPerSecond
	}
	if burst <= 0 {
		burst = DefaultAuthReviewsBurst
	}
	if inflight <= 0 {
		inflight = DefaultAuthReviewsInFlight
	}
	share := inflight / 4 // of the reviews under way, one address's
	if share < 1 {
		share = 1
	}
	return &routeAuth{reviewer: rv, ttl: ttl, max: max, now: now, inflight: make(chan struct{}, inflight),
		clients: newClientBudgets(DefaultAuthClients, rate.Limit(perSecond), burst, share),
		allowed: newDecisionLRU(max), refused: newDecisionLRU(max)}
}

// clientBudgets is the review budget of each client address: a rate limiter and a count of
// its reviews under way, in an LRU of at most max addresses. Safe for concurrent use.
type clientBudgets struct {
	mu        sync.Mutex
	max       int
	perSecond rate.Limit
	burst     int
	share     int        // reviews under way one address may hold
	ll        *list.List // of *clientBudget, most recently seen first
	m         map[string]*list.Element
}

// clientBudget is one address's budget; inflight is guarded by clientBudgets.mu.
type clientBudget struct {
	key      string
	lim      *rate.Limiter
	inflight int
}

func newClientBudgets(max int, perSecond rate.Limit, burst, share int) *clientBudgets {
	return &clientBudgets{max: max, perSecond: perSecond, burst: burst, share: share, ll: list.New(), m: map[string]*list.Element{}}
}

// acquire takes one review from key's budget at now: false when its rate or its share of
// reviews under way is spent. On true, call release when the review is over.
func (c *clientBudgets) acquire(key string, now time.Time) (b *clientBudget, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, hit := c.m[key]; hit {
		c.ll.MoveToFront(e)
		b = e.Value.(*clientBudget)
	} else {
		b = &clientBudget{key: key, lim: rate.NewLimiter(c.perSecond, c.burst)}
		c.m[key] = c.ll.PushFront(b)
		for c.ll.Len() > c.max {
			last := c.ll.Back()
			c.ll.Remove(last)
			delete(c.m, last.Value.(*clientBudget).key)
		}
	}
	if b.inflight >= c.share || !b.lim.AllowN(now, 1) {
		return nil, false
	}
	b.inflight++
	return b, true
}

// release ends a review acquire allowed.
func (c *clientBudgets) release(b *clientBudget) {
	c.mu.Lock()
	b.inflight--
	c.mu.Unlock()
}

// clientKey is the budget key of r's client: the remote IP, an IPv6 address by its /64 (one
// host usually holds a whole /64). The route trusts no forwarding header (a caller sets it).
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// authDecision is a cached answer: status 0 allows, 401 or 403 refuses with msg.
type authDecision struct {
	status  int
	msg     string
	expires time.Time
}

// reviewsBusyMsg is check's answer when the bounds on reviews are reached.
const reviewsBusyMsg = "too many callers to check at once: retry later"

// check returns 0 when r may invoke Function namespace/name, else the status (401, 403, 429
// when the bounds on reviews are reached, or 503 when the API server could not answer) and a
// message saying why.
func (a *routeAuth) check(r *http.Request, namespace, name string) (int, string) {
	if a == nil || a.reviewer == nil {
		return http.StatusUnauthorized, "the route has no token reviewer configured: nothing may invoke through it"
	}
	token, ok := bearerToken(r)
	if !ok {
		return http.StatusUnauthorized, "no bearer token: send Authorization: Bearer <a Kubernetes ServiceAccount token> (kubectl create token NAME)"
	}
	key := authKey(token, namespace, name)
	now := a.now()
	a.mu.Lock()
	d, hit := a.allowed.get(key, now)
	if !hit {
		d, hit = a.refused.get(key, now)
	}
	a.mu.Unlock()
	if hit {
		return d.status, d.msg
	}
	b, ok := a.clients.acquire(clientKey(r), now)
	if !ok {
		return http.StatusTooManyRequests, reviewsBusyMsg
	}
	defer a.clients.release(b)
	select {
	case a.inflight <- struct{}{}:
		defer func() { <-a.inflight }()
	default:
		return http.StatusTooManyRequests, reviewsBusyMsg
	}
	d, err := a.decide(r.Context(), token, namespace, name)
	if err != nil {
		return http.StatusServiceUnavailable, "checking the caller with the API server: " + err.Error()
	}
	d.expires = now.Add(a.ttl)
	a.mu.Lock()
	if d.status == 0 {
		a.allowed.put(key, d)
		a.refused.remove(key)
	} else {
		a.refused.put(key, d)
		a.allowed.remove(key)
	}
	a.mu.Unlock()
	return d.status, d.msg
}

// authKey is the cache key of token and Function namespace/name: each part's length comes
// before it, so no two (namespace, name) pairs share a key.
func authKey(token, namespace, name string) [sha256.Size]byte {
	return sha256.Sum256([]byte(fmt.Sprintf("%d:%s%d:%s%d:%s", len(token), token, len(namespace), namespace, len(name), name)))
}

// decide asks the reviewer (a TokenReview, then a SubjectAccessReview).
func (a *routeAuth) decide(ctx context.Context, token, namespace, name string) (authDecision, error) {
	u, ok, reason, err := a.reviewer.Authenticate(ctx, token)
	if err != nil {
		return authDecision{}, err
	}
	if !ok {
		return authDecision{status: http.StatusUnauthorized, msg: "the bearer token is not valid: " + reason}, nil
	}
	allowed, reason, err := a.reviewer.MayInvoke(ctx, u, namespace, name)
	if err != nil {
		return authDecision{}, err
	}
	if !allowed {
		msg := fmt.Sprintf("user %q may not %s %s/%s (group %s) of Function %s/%s: bind ClusterRole zygo-function-invoker to it in namespace %s",
			u.Username, InvokeVerb, InvokeResource, InvokeSubresource, zygov1.GroupVersion.Group, namespace, name, namespace)
		if reason != "" {
			msg += " (" + reason + ")"
		}
		return authDecision{status: http.StatusForbidden, msg: msg}, nil
	}
	return authDecision{}, nil
}

// decisionLRU is a cache of at most max decisions; past it, the least recently used goes. Not
// safe for concurrent use (routeAuth.mu guards it).
type decisionLRU struct {
	max int
	ll  *list.List // of *lruEntry, most recently used first
	m   map[[sha256.Size]byte]*list.Element
}

type lruEntry struct {
	key [sha256.Size]byte
	d   authDecision
}

func newDecisionLRU(max int) *decisionLRU {
	return &decisionLRU{max: max, ll: list.New(), m: map[[sha256.Size]byte]*list.Element{}}
}

// get returns key's decision if it has one not expired at now (an expired one is dropped).
func (c *decisionLRU) get(key [sha256.Size]byte, now time.Time) (authDecision, bool) {
	e, ok := c.m[key]
	if !ok {
		return authDecision{}, false
	}
	ent := e.Value.(*lruEntry)
	if !now.Before(ent.d.expires) {
		c.ll.Remove(e)
		delete(c.m, key)
		return authDecision{}, false
	}
	c.ll.MoveToFront(e)
	return ent.d, true
}

// put stores d under key, dropping the least recently used entry when the cache is full.
func (c *decisionLRU) put(key [sha256.Size]byte, d authDecision) {
	if e, ok := c.m[key]; ok {
		e.Value.(*lruEntry).d = d
		c.ll.MoveToFront(e)
		return
	}
	c.m[key] = c.ll.PushFront(&lruEntry{key: key, d: d})
	for c.ll.Len() > c.max {
		last := c.ll.Back()
		c.ll.Remove(last)
		delete(c.m, last.Value.(*lruEntry).key)
	}
}

// remove drops key's decision, if any.
func (c *decisionLRU) remove(key [sha256.Size]byte) {
	if e, ok := c.m[key]; ok {
		c.ll.Remove(e)
		delete(c.m, key)
	}
}

// len returns how many decisions c holds.
func (c *decisionLRU) len() int { return c.ll.Len() }

// bearerToken returns the token of an "Authorization: Bearer TOKEN" header.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// refuse answers a refused invoke: 401 with a WWW-Authenticate challenge, 403, 429 with
// Retry-After, or 503.
func refuse(w http.ResponseWriter, status int, msg string) {
	code := wire.CodeUnavailable
	switch status {
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", "1")
		code = wire.CodeTooManyRequests
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="zygo-route"`)
		code = wire.CodeUnauthenticated
	case http.StatusForbidden:
		code = wire.CodePermissionDenied
	}
	writeError(w, status, code, msg)
}
