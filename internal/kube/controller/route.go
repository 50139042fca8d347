package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// maxEventBytes bounds an invoke's body at the route.
const maxEventBytes = 6 << 20

// NodeHeader names, in the route's answer, the ZygoNode that served the request.
const NodeHeader = "X-Zygo-Node"

// Route is the controller's HTTP front of the Functions: POST
// /functions/NAMESPACE/NAME/invoke forwards the event to one of the Function's Ready nodes
// (round robin) and answers what the node answered. The caller sends "Authorization: Bearer
// TOKEN", a Kubernetes token (a ServiceAccount's); Auth authenticates it (a TokenReview) and
// authorises it (a SubjectAccessReview: create functions/invoke of that Function, group
// zygo.run): 401 without a valid token, 403 when not allowed, each with a message saying why,
// 429 when too many uncached tokens are being checked (a flood of bogus tokens).
// A decision is cached per token and Function for AuthTTL, so per-request invokes do not
// reach the API server; the Function and the nodes are read from Reader (the manager's
// cache).
type Route struct {
	Reader client.Reader
	Dialer Dialer
	Log    *slog.Logger
	// Auth checks callers. nil: every invoke is refused (401).
	Auth Reviewer
	// AuthTTL is how long a decision is cached (0: DefaultAuthCacheTTL); AuthEntries bounds
	// each of the caches of allowances and refusals (0: DefaultAuthCacheEntries).
	AuthTTL     time.Duration
	AuthEntries int
	// AuthReviewsPerSecond and AuthReviewsBurst bound the reviews of uncached tokens per
	// client address, AuthReviewsInFlight those under way at once (one address: a quarter)
	// (0: DefaultAuthReviewsPerSecond, ...Burst, ...InFlight); past them an uncached caller
	// gets 429 with Retry-After.
	AuthReviewsPerSecond float64
	AuthReviewsBurst     int
	AuthReviewsInFlight  int
	// Now is the cache's clock (nil: time.Now).
	Now func() time.Time

	next atomic.Uint64 // round-robin counter
	auth *routeAuth    // set by Handler
}

// Handler returns the route's handler. Call it once.
func (rt *Route) Handler() http.Handler {
	rt.auth = newRouteAuth(rt.Auth, rt.AuthTTL, rt.AuthEntries, rt.Now, rt.AuthReviewsPerSecond, rt.AuthReviewsBurst, rt.AuthReviewsInFlight)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /functions/{namespace}/{name}/invoke", rt.invoke)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	return mux
}

func (rt *Route) invoke(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	// The caller first: an unauthenticated one learns nothing, not even whether it exists.
	if status, msg := rt.auth.check(r, ns, name); status != 0 {
		refuse(w, status, msg)
		return
	}
	var fn zygov1.Function
	if err := rt.Reader.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: name}, &fn); err != nil {
		if apierrors.IsNotFound(err) {
			writeError(w, http.StatusNotFound, wire.CodeNotFound, fmt.Sprintf("no Function %s/%s", ns, name))
			return
		}
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "reading Function "+ns+"/"+name+": "+err.Error())
		return
	}
	var nodes []*zygov1.ZygoNode
	for _, fnode := range fn.Status.Nodes {
		n, err := getNode(r.Context(), rt.Reader, fnode.Name)
		if err == nil && nodeReady(n) {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable,
			fmt.Sprintf("Function %s/%s is served by no Ready node (%s)", ns, name, conditionMessage(fn.Status.Conditions, zygov1.ConditionReady)))
		return
	}
	event, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxEventBytes))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, wire.CodeBadRequest, fmt.Sprintf("reading the event (at most %d bytes): %v", maxEventBytes, err))
		return
	}
	node := nodes[rt.next.Add(1)%uint64(len(nodes))]
	a, err := rt.Dialer.Agent(r.Context(), node)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, err.Error())
		return
	}
	res, err := a.Invoke(r.Context(), nodeFunctionName(ns, name), event)
	w.Header().Set(NodeHeader, node.Name)
	if err != nil {
		var ze *zygo.Error
		if errors.As(err, &ze) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(ze.Status)
			_ = json.NewEncoder(w).Encode(ze.ErrorBody)
			return
		}
		writeError(w, http.StatusBadGateway, wire.CodeUnavailable, fmt.Sprintf("node %s: %v", node.Name, err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(wire.RequestIDHeader, res.RequestID)
	w.Header().Set(wire.VersionHeader, res.Version)
	_, _ = w.Write(res.Value)
}

// writeError answers status with the agents' error body.
func writeError(w http.ResponseWriter, status int, code wire.Code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(wire.ErrorBody{Code: code, Message: msg})
}
