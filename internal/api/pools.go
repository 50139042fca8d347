package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/pool"
	"github.com/zygo-run/zygo/internal/secret"
	"github.com/zygo-run/zygo/internal/store"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// Pools is what the server needs from the runtime pool manager
// (internal/pool).
type Pools interface {
	Up(ctx context.Context, manifest []byte) (pool.UpResult, error)
	List() []pool.Status
	Get(name string) (pool.Status, error)
	Remove(ctx context.Context, name string) error
	PutScript(name, tenant string, s pool.Script) (string, error)
	Run(ctx context.Context, name string, rr pool.RunRequest) (*pool.RunResult, error)
}

// maxPoolManifest bounds a pool's zygo.toml, bytes.
const maxPoolManifest = 64 << 10

// WithPools serves the /v1/pools routes with p.
func (s *Server) WithPools(p Pools) *Server {
	s.pools = p
	return s
}

// needPools returns h given the daemon's pools, or a handler answering 503 when it has none.
func (s *Server) needPools(h func(http.ResponseWriter, *http.Request, Pools)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.pools == nil {
			s.fail(w, fmt.Errorf("%w: runtime pools are not enabled on this daemon", errdefs.ErrUnavailable))
			return
		}
		h(w, r, s.pools)
	}
}

func (s *Server) poolUp(w http.ResponseWriter, r *http.Request, p Pools) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPoolManifest+1))
	if err != nil || len(raw) > maxPoolManifest {
		s.fail(w, fmt.Errorf("%w: zygo.toml: over %d KiB", errdefs.ErrTooLarge, maxPoolManifest>>10))
		return
	}
	res, err := p.Up(r.Context(), raw)
	if err != nil {
		var ie *agentproc.ImportError
		if errors.As(err, &ie) {
			writeError(w, wire.ErrorBody{Code: wire.CodeImportFailed, Type: ie.Type,
				Message:   "the pool's preload failed to import; the pool was not changed: " + ie.Type + ": " + ie.Message,
				Traceback: ie.Traceback})
			return
		}
		s.fail(w, err)
		return
	}
	st, _ := p.Get(res.Name)
	out := wire.PoolUpResult{Name: res.Name, Unchanged: res.Unchanged, Isolation: st.Manifest.Isolation, Fallback: res.Warmup.Fallback}
	for _, c := range res.Warmup.Ready.Checks {
		out.Checks = append(out.Checks, wire.Check{Name: c.Name, Level: c.Level, Detail: c.Detail})
	}
	code := http.StatusCreated
	if res.Unchanged {
		code = http.StatusOK
	}
	writeJSON(w, code, out)
}

func poolOf(st pool.Status) wire.Pool {
	m := st.Manifest
	out := wire.Pool{Name: st.Name, Isolation: m.Isolation, Preload: m.Preload, Interpreter: m.Interpreter,
		Concurrency: m.Concurrency, TenantConcurrency: m.Tenant.Concurrency, TenantQueue: m.Tenant.Queue,
		TenantIdleS: m.Tenant.IdleS, Strict: m.Strict, Running: st.Running, Waiting: st.Waiting,
		Tenants: st.Tenants, Fallback: st.Fallback, Created: st.Created, Lanes: []wire.PoolLane{},
		Limits: wire.FunctionLimits{TimeoutMs: m.Limits.TimeoutMs, MemoryMiB: m.Limits.MemoryMiB, PIDs: m.Limits.PIDs,
			CPUMs: m.Limits.CPUMs, MaxRequestKiB: m.Limits.MaxRequestKiB, MaxResponseKiB: m.Limits.MaxResponseKiB}}
	if out.Preload == nil {
		out.Preload = []string{}
	}
	for _, l := range st.Lanes {
		out.Lanes = append(out.Lanes, wire.PoolLane{Lane: l.Lane, State: l.State, HostPID: l.HostPID, InFlight: l.InFlight})
	}
	return out
}

func (s *Server) poolList(w http.ResponseWriter, r *http.Request, p Pools) {
	q, ok := pageQueryOf(w, r)
	if !ok {
		return
	}
	sts := p.List()
	items := make([]wire.Pool, len(sts))
	for i, st := range sts {
		items[i] = poolOf(st)
	}
	writePage(w, q, items, func(p wire.Pool) string { return p.Name })
}

func (s *Server) poolGet(w http.ResponseWriter, r *http.Request, p Pools) {
	st, err := p.Get(r.PathValue("name"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, poolOf(st))
}

func (s *Server) poolRemove(w http.ResponseWriter, r *http.Request, p Pools) {
	if err := p.Remove(r.Context(), r.PathValue("name")); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) poolPutScript(w http.ResponseWriter, r *http.Request, p Pools) {
	tenant := r.URL.Query().Get("tenant")
	if err := secret.ValidTenant("tenant", tenant); err != nil {
		s.fail(w, err)
		return
	}
	ctype, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	isTar := ctype == wire.TarContentType || ctype == "application/gzip"
	body := http.MaxBytesReader(w, r.Body, 2*pool.MaxScriptBytes)
	script, err := pool.ReadScript(body, isTar)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = fmt.Errorf("%w: script: over %d bytes", errdefs.ErrTooLarge, pool.MaxScriptBytes)
		}
		s.fail(w, err)
		return
	}
	hash, err := p.PutScript(r.PathValue("name"), tenant, script)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, wire.ScriptResult{Tenant: tenant, Hash: hash})
}

// maxRunBody bounds a run's body: the largest event any pool may take plus
// an inline script (as a JSON string, escaped), bytes.
const maxRunBody = 6<<20 + 3*pool.MaxScriptBytes

func (s *Server) poolRun(w http.ResponseWriter, r *http.Request, p Pools) {
	var in wire.PoolRunRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRunBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.fail(w, fmt.Errorf("%w: the run's body is over %d MiB", errdefs.ErrTooLarge, maxRunBody>>20))
			return
		}
		badRequest(w, "body: not a run request: "+strings.TrimPrefix(err.Error(), "json: "))
		return
	}
	rr := pool.RunRequest{Tenant: in.Tenant, Hash: in.Script, Entry: in.Entry, Event: in.Event, Secrets: in.Secrets}
	if in.Source != "" {
		if len(in.Source) > pool.MaxScriptBytes {
			s.fail(w, fmt.Errorf("%w: source: over %d bytes", errdefs.ErrTooLarge, pool.MaxScriptBytes))
			return
		}
		rr.Source = pool.Script{pool.ScriptFile: []byte(in.Source)}
	}
	res, err := p.Run(r.Context(), r.PathValue("name"), rr)
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set(wire.ScriptHeader, res.Hash)
	w.Header().Set(wire.LaneHeader, res.Lane)
	w.Header().Set(wire.MountedHeader, strconv.FormatBool(res.Mounted))
	answerRequest(w, ranRequest{id: res.RequestID, child: res.Child, elapsed: res.Elapsed, phases: res.Phases,
		failure: res.Failure, err: res.Error, value: res.Value})
}

func (s *Server) poolLogs(w http.ResponseWriter, r *http.Request, p Pools) {
	name := r.PathValue("name")
	if _, err := p.Get(name); err != nil {
		s.fail(w, err)
		return
	}
	q := store.LogQuery{Function: "pool:" + name, RequestID: r.URL.Query().Get("request")}
	var err error
	if v := r.URL.Query().Get("after"); v != "" {
		if q.AfterID, err = strconv.ParseInt(v, 10, 64); err != nil {
			badRequest(w, "after: not an integer")
			return
		}
	}
	if v := r.URL.Query().Get("limit"); v != "" {
		if q.Limit, err = strconv.Atoi(v); err != nil || q.Limit < 1 || q.Limit > wire.MaxLogsLimit {
			badRequest(w, fmt.Sprintf("limit: must be 1..%d", wire.MaxLogsLimit))
			return
		}
	}
	lines, err := s.logs.Logs(r.Context(), q)
	if err != nil {
		s.fail(w, err)
		return
	}
	next := q.AfterID
	if len(lines) > 0 {
		next = lines[len(lines)-1].ID
	}
	writeJSON(w, http.StatusOK, wire.LogsBody{Lines: logLinesOf(lines), Next: next})
}
