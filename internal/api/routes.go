package api

import (
	"net/http"
	"strconv"

	spec "github.com/zygo-run/zygo/api"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// Route is one route of the API: a method and a path pattern in net/http.ServeMux syntax
// ("/v1/functions/{name}"). Routes lists them all; api/openapi.yaml documents each, and
// TestOpenAPIRoutes fails when the two differ.
type Route struct {
	Method, Path string
}

// String returns the route as a ServeMux pattern: "GET /v1/status".
func (r Route) String() string { return r.Method + " " + r.Path }

// handled is a route with its handler.
type handled struct {
	Route
	h http.HandlerFunc
}

// table is the one list of the API's routes. Handler serves exactly these; Routes returns
// them. Sandbox routes answer 503 when the daemon has no sandboxes (needSandboxes), pool
// routes when it has no pools (needPools), token routes when it has no tokens (needTokens).
func (s *Server) table() []handled {
	sb, pl := s.needSandboxes, s.needPools
	return []handled{
		{Route{"GET", "/v1/status"}, s.status},
		{Route{"GET", "/v1/openapi.json"}, s.openAPI},

		{Route{"POST", "/v1/functions"}, s.deploy},               // body: gzip'd tar of a function dir
		{Route{"GET", "/v1/functions"}, s.list},                  // Page of Function, by name
		{Route{"GET", "/v1/functions/{name}"}, s.get},            //
		{Route{"DELETE", "/v1/functions/{name}"}, s.remove},      //
		{Route{"POST", "/v1/functions/{name}/invoke"}, s.invoke}, // body: the event (JSON)
		{Route{"GET", "/v1/functions/{name}/versions"}, s.versions},
		{Route{"POST", "/v1/functions/{name}/rollback"}, s.rollbackFunction},
		{Route{"GET", "/v1/functions/{name}/logs"}, s.getLogs},  // ?request=ID&after=N&limit=N&since=T&tail=N
		{Route{"PUT", "/v1/secrets/{name}"}, s.setSecret},       // body: the value (raw bytes)
		{Route{"GET", "/v1/secrets"}, s.listSecrets},            // Page of SecretMeta, by name
		{Route{"DELETE", "/v1/secrets/{name}"}, s.removeSecret}, //

		{Route{"POST", "/v1/sandboxes"}, sb(s.createSandbox)},
		{Route{"GET", "/v1/sandboxes"}, sb(s.listSandboxes)},
		{Route{"GET", "/v1/sandboxes/{id}"}, sb(s.getSandbox)},
		{Route{"DELETE", "/v1/sandboxes/{id}"}, sb(s.removeSandbox)},
		{Route{"POST", "/v1/sandboxes/{id}/exec"}, sb(s.execSandbox)},
		{Route{"POST", "/v1/sandboxes/{id}/run-code"}, sb(s.runCode)},
		{Route{"PUT", "/v1/sandboxes/{id}/files"}, sb(s.putFile)},
		{Route{"GET", "/v1/sandboxes/{id}/files"}, sb(s.getFile)},
		{Route{"GET", "/v1/sandboxes/{id}/files/list"}, sb(s.listFiles)},
		{Route{"POST", "/v1/sandboxes/{id}/checkpoint"}, sb(s.checkpoint)},
		{Route{"GET", "/v1/sandboxes/{id}/checkpoints"}, sb(s.sandboxCheckpoints)},
		{Route{"POST", "/v1/sandboxes/{id}/fork"}, sb(s.fork)},
		{Route{"POST", "/v1/sandboxes/{id}/rollback"}, sb(s.rollback)},
		{Route{"GET", "/v1/sandboxes/{id}/generation"}, sb(s.generation)},
		{Route{"GET", "/v1/sandboxes/{id}/services"}, sb(s.services)},
		{Route{"POST", "/v1/sandboxes/{id}/ports/{port}"}, sb(s.port)},
		{Route{"DELETE", "/v1/sandboxes/{id}/ports/{port}"}, sb(s.unpublish)},
		{Route{"POST", "/v1/sandboxes/{id}/pause"}, sb(s.pauseSandbox)},
		{Route{"POST", "/v1/sandboxes/{id}/resume"}, sb(s.resumeSandbox)},
		{Route{"POST", "/v1/sandboxes/{id}/timeout"}, sb(s.setSandboxTimeout)},
		{Route{"POST", "/v1/sandboxes/{id}/access-token"}, sb(s.mintAccessToken)}, // access.go
		{Route{"POST", "/v1/checkpoints/{id}/restore"}, sb(s.restoreCheckpoint)},
		{Route{"GET", "/v1/templates"}, sb(s.listTemplates)},
		{Route{"GET", "/v1/checkpoints"}, sb(s.listCheckpoints)},
		{Route{"GET", "/v1/checkpoints/{id}"}, sb(s.getCheckpoint)},
		{Route{"DELETE", "/v1/checkpoints/{id}"}, sb(s.removeCheckpoint)},
		{Route{"GET", "/v1/checkpoints/{id}/image"}, sb(s.exportCheckpoint)}, // a tar; size and SHA-256 in headers
		{Route{"POST", "/v1/checkpoints/import"}, sb(s.importCheckpoint)},    // body: that tar; ?sha256=

		{Route{"POST", "/v1/tokens"}, s.needTokens(s.unixOnly(s.createToken))},
		{Route{"GET", "/v1/tokens"}, s.needTokens(s.listTokens)},
		{Route{"DELETE", "/v1/tokens/{name}"}, s.needTokens(s.unixOnly(s.revokeToken))},

		{Route{"POST", "/v1/pools"}, pl(s.poolUp)},
		{Route{"GET", "/v1/pools"}, pl(s.poolList)},
		{Route{"GET", "/v1/pools/{name}"}, pl(s.poolGet)},
		{Route{"DELETE", "/v1/pools/{name}"}, pl(s.poolRemove)},
		{Route{"PUT", "/v1/pools/{name}/scripts"}, pl(s.poolPutScript)},
		{Route{"POST", "/v1/pools/{name}/run"}, pl(s.poolRun)},
		{Route{"GET", "/v1/pools/{name}/logs"}, pl(s.poolLogs)},

		{Route{"GET", "/metrics"}, s.serveMetrics}, // Prometheus text format (internal/metrics)
	}
}

// Routes returns every route the API serves, in the order of its table.
func Routes() []Route {
	t := (&Server{}).table()
	out := make([]Route, len(t))
	for i, h := range t {
		out[i] = h.Route
	}
	return out
}

// openAPI answers the API's OpenAPI document (api/openapi.yaml) as JSON.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	b, err := spec.JSON()
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// Handler returns the HTTP handler with every route. Every answer carries the API version
// (wire.APIVersionHeader); a path of no route is a 404 and a route's path with another method
// a 405 listing the methods it has (Allow), both with the one error body.
// It is the unix socket's (no token: the socket's mode is the access control); TCPHandler is
// the TCP listener's.
func (s *Server) Handler() http.Handler { return withAPIVersion(s.accessLog(noRoute(s.mux()))) }

// mux returns a ServeMux serving exactly the table's routes.
func (s *Server) mux() *http.ServeMux {
	mux := http.NewServeMux()
	for _, h := range s.table() {
		mux.HandleFunc(h.String(), s.scoped(h.Route, h.h)) // a sandbox access token's reach (access.go)
	}
	return mux
}

// withAPIVersion returns h with wire.APIVersionHeader set on every answer.
func withAPIVersion(h http.Handler) http.Handler {
	v := strconv.Itoa(wire.APIVersion)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(wire.APIVersionHeader, v)
		h.ServeHTTP(w, r)
	})
}

// noRoute returns mux with its answers for a request no route takes made the API's: a 404,
// or a 405 with the Allow header mux computed, each with an error body.
func noRoute(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// Let the mux's own answer say which of the two it is (and what Allow holds),
		// and keep only its status and headers.
		probe := &headerProbe{header: http.Header{}}
		h.ServeHTTP(probe, r)
		if probe.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", probe.header.Get("Allow"))
			writeError(w, wire.ErrorBody{Code: wire.CodeMethodNotAllowed, Message: "method " + r.Method +
				" is not allowed on " + r.URL.Path + ": it takes " + probe.header.Get("Allow")})
			return
		}
		writeError(w, wire.ErrorBody{Code: wire.CodeNotFound, Message: "no route " + r.Method + " " + r.URL.Path})
	})
}

// headerProbe is a ResponseWriter that keeps the status and headers and drops the body.
type headerProbe struct {
	header http.Header
	status int
}

func (p *headerProbe) Header() http.Header { return p.header }

func (p *headerProbe) WriteHeader(code int) {
	if p.status == 0 {
		p.status = code
	}
}

func (p *headerProbe) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return len(b), nil
}
