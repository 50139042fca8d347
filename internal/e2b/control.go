package e2b

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// Sandboxes is what the control API needs of the sandbox manager (*sandbox.Manager).
type Sandboxes interface {
	Create(ctx context.Context, opts sandbox.CreateOptions) (sandbox.SandboxRecord, error)
	Get(ctx context.Context, id string) (sandbox.SandboxRecord, error)
	List(ctx context.Context) ([]sandbox.SandboxRecord, error)
	Remove(ctx context.Context, id string) error
	Fork(ctx context.Context, id string, opts sandbox.ForkOptions) (sandbox.ForkResult, error)
	Pause(ctx context.Context, id string) (sandbox.SandboxRecord, error)
	Resume(ctx context.Context, id string, timeout time.Duration) (sandbox.SandboxRecord, error)
	Restore(ctx context.Context, checkpoint string, opts sandbox.RestoreOptions) (sandbox.SandboxRecord, error)
	SetTimeout(ctx context.Context, id string, timeout time.Duration, onTimeout string) (sandbox.SandboxRecord, error)
	Checkpoint(ctx context.Context, id, tag string) (sandbox.CheckpointRecord, error)
	Checkpoints(ctx context.Context, sandboxID string) ([]sandbox.CheckpointRecord, error)
	GetCheckpoint(ctx context.Context, checkpoint string) (sandbox.CheckpointRecord, error)
	RemoveCheckpoint(ctx context.Context, checkpoint string) error
	Templates() []sandbox.Template
	MaxFork() int
}

var _ Sandboxes = (*sandbox.Manager)(nil)

// defaultTimeout is E2B's default sandbox timeout when a request names none (NewSandbox's
// default: 15 s; the SDKs send their own, 300 s).
const defaultTimeout = 15 * time.Second

// clientID is the deprecated clientID every E2B sandbox carries.
const clientID = "zygo"

// Tags of the checkpoints the control API takes: Pause's and a snapshot's default.
const (
	pauseTag    = sandbox.PauseTag
	snapshotTag = "snapshot"
)

type control struct {
	cfg Config
	log *slog.Logger
}

// routes is the control API's route table (E2B's paths).
func (c *control) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes", c.create)
	mux.HandleFunc("POST /v2/sandboxes", c.create) // the SDKs from 2.5x; NewSandboxV2 is NewSandbox without secure
	mux.HandleFunc("GET /sandboxes", c.listV1)
	mux.HandleFunc("GET /v2/sandboxes", c.listV2)
	mux.HandleFunc("GET /sandboxes/{id}", c.get)
	mux.HandleFunc("DELETE /sandboxes/{id}", c.kill)
	mux.HandleFunc("POST /sandboxes/{id}/timeout", c.setTimeout)
	mux.HandleFunc("POST /sandboxes/{id}/refreshes", c.refresh)
	mux.HandleFunc("POST /sandboxes/{id}/connect", c.connect)
	mux.HandleFunc("POST /v2/sandboxes/{id}/connect", c.connectV2)
	mux.HandleFunc("POST /sandboxes/{id}/pause", c.pause)
	mux.HandleFunc("POST /sandboxes/{id}/resume", c.resume)
	mux.HandleFunc("POST /sandboxes/{id}/fork", c.fork)
	mux.HandleFunc("POST /sandboxes/{id}/snapshots", c.snapshot)
	mux.HandleFunc("GET /snapshots", c.listSnapshots)
	mux.HandleFunc("DELETE /templates/{id}", c.deleteSnapshot)
	mux.HandleFunc("GET /templates", c.templates)
	mux.HandleFunc("GET /sandboxes/{id}/metrics", c.metrics)
	mux.HandleFunc("GET /sandboxes/{id}/logs", c.logs)
	mux.HandleFunc("GET /v2/sandboxes/{id}/logs", c.logs)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no route %s %s on this E2B-compatible API", r.Method, r.URL.Path))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// fail answers err with E2B's error shape and the status of its category.
func (c *control) fail(w http.ResponseWriter, err error) {
	status := statusOf(err)
	if status == http.StatusInternalServerError {
		c.log.Error("e2b: an error of no category", "err", err)
	}
	writeError(w, status, errdefs.Message(err))
}

// statusOf maps an errdefs category to its HTTP status.
func statusOf(err error) int {
	switch {
	case errdefs.IsNotFound(err):
		return http.StatusNotFound
	case errdefs.IsInvalidArgument(err):
		return http.StatusBadRequest
	case errdefs.IsExists(err), errdefs.IsFailedPrecondition(err):
		return http.StatusConflict
	case errdefs.IsUnavailable(err):
		return http.StatusServiceUnavailable
	case errors.Is(err, errdefs.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, errdefs.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusInternalServerError
}

// visible reports whether a sandbox in state s exists for E2B (running or paused); dead,
// failed and half-made ones are not listed and answer 404.
func visible(s sandbox.State) bool {
	switch s {
	case sandbox.Running, sandbox.Checkpointing, sandbox.RollingBack, sandbox.Recovering,
		sandbox.Paused, sandbox.Resuming:
		return true
	}
	return false
}

// remains reports whether a sandbox in state s, which E2B does not show, may still hold
// engine processes (a remove or the engine failed): DELETE removes it all the same, so an
// E2B client can always free what it made.
func remains(s sandbox.State) bool {
	return s == sandbox.Failed || s == sandbox.Dead || s == sandbox.Removing
}

func stateOf(s sandbox.State) string {
	if s == sandbox.Paused {
		return "paused"
	}
	return "running"
}

// lookup returns the visible sandbox id, or answers 404 in E2B's words.
func (c *control) lookup(w http.ResponseWriter, r *http.Request) (sandbox.SandboxRecord, bool) {
	id := r.PathValue("id")
	rec, err := c.cfg.Sandboxes.Get(r.Context(), id)
	if err == nil && !visible(rec.State) {
		err = fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		c.fail(w, err)
		return rec, false
	}
	return rec, true
}

func (c *control) sandboxBody(rec sandbox.SandboxRecord) sandboxBody {
	return sandboxBody{TemplateID: templateOf(rec), SandboxID: rec.ID, ClientID: clientID, EnvdVersion: c.cfg.EnvdVersion,
		EnvdAccessToken: AccessToken(c.cfg.AccessKey, rec)}
}

// templateOf is what a sandbox is made from: its template's name, else its root.
func templateOf(rec sandbox.SandboxRecord) string {
	if rec.Options.Template != "" {
		return rec.Options.Template
	}
	if rec.Options.RootfsDir != "" {
		return rec.Options.RootfsDir
	}
	return "default"
}

func (c *control) detail(rec sandbox.SandboxRecord, withToken bool) sandboxDetail {
	d := sandboxDetail{TemplateID: templateOf(rec), SandboxID: rec.ID, ClientID: clientID, StartedAt: rec.CreatedAt.UTC(),
		EnvdVersion: c.cfg.EnvdVersion, CPUCount: max(1, int(rec.Options.CPUs+0.999)), MemoryMB: rec.Options.MemoryMiB,
		Metadata: rec.Options.Metadata, State: stateOf(rec.State), VolumeMounts: []struct{}{}}
	if d.Metadata == nil {
		d.Metadata = map[string]string{}
	}
	l := rec.Options.Lifecycle
	d.EndAt = l.ExpiresAt
	if d.EndAt.IsZero() {
		d.EndAt = d.StartedAt.Add(sandbox.MaxTimeout) // no timeout: E2B has no "never"
	}
	on := sandbox.OnTimeoutKill
	if l.OnTimeout == sandbox.OnTimeoutPause {
		on = sandbox.OnTimeoutPause
	}
	if withToken {
		d.EnvdAccessToken = AccessToken(c.cfg.AccessKey, rec)
		d.Lifecycle = &lifecycleBody{OnTimeout: on}
	}
	return d
}

// checkUnsupported refuses the NewSandbox fields Zygo cannot honour.
func checkUnsupported(b newSandbox) error {
	bad := func(field, why string) error {
		return fmt.Errorf("%s: %s: %w", field, why, errdefs.ErrInvalidArgument)
	}
	switch {
	case len(b.Network) > 0 && string(b.Network) != "null" && string(b.Network) != "{}":
		return bad("network", "per-sandbox egress rules are not supported by Zygo's E2B API (the daemon's sandbox network applies)")
	case len(b.Mcp) > 0 && string(b.Mcp) != "null":
		return bad("mcp", "MCP gateways are not supported")
	case len(b.VolumeMounts) > 0 && string(b.VolumeMounts) != "null" && string(b.VolumeMounts) != "[]":
		return bad("volumeMounts", "volumes are not supported")
	case len(b.IAM) > 0 && string(b.IAM) != "null":
		return bad("iam", "workload identity is not supported")
	case len(b.AutoResume) > 0 && string(b.AutoResume) != "null" && !strings.Contains(string(b.AutoResume), "false"):
		return bad("autoResume", "resuming on traffic is not supported: resume with connect")
	}
	return nil
}

func (c *control) create(w http.ResponseWriter, r *http.Request) {
	var b newSandbox
	if !decode(w, r, &b) {
		return
	}
	if err := checkUnsupported(b); err != nil {
		c.fail(w, err)
		return
	}
	if b.TemplateID == "" {
		writeError(w, http.StatusBadRequest, "templateID: required")
		return
	}
	timeout, err := seconds("timeout", b.Timeout, defaultTimeout)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	life := sandbox.Lifecycle{Timeout: timeout, OnTimeout: sandbox.OnTimeoutKill}
	if b.AutoPause != nil && *b.AutoPause {
		life.OnTimeout = sandbox.OnTimeoutPause
	}
	rec, err := c.createFrom(r.Context(), b, life)
	if err != nil {
		c.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, c.sandboxBody(rec))
}

// createFrom makes the sandbox of b: from a template, or from a snapshot (a checkpoint id or
// tag) restored into a new sandbox. A name that is neither is E2B's 404.
func (c *control) createFrom(ctx context.Context, b newSandbox, life sandbox.Lifecycle) (sandbox.SandboxRecord, error) {
	sb := c.cfg.Sandboxes
	for _, t := range sb.Templates() {
		if t.Name == b.TemplateID {
			env := make([]string, 0, len(b.EnvVars))
			for k, v := range b.EnvVars {
				env = append(env, k+"="+v)
			}
			sort.Strings(env)
			return sb.Create(ctx, sandbox.CreateOptions{Template: t.Name, Env: env, Metadata: b.Metadata, Lifecycle: life})
		}
	}
	if strings.HasPrefix(b.TemplateID, "cp-") || !strings.ContainsAny(b.TemplateID, "/") {
		if _, err := sb.GetCheckpoint(ctx, b.TemplateID); err == nil {
			if len(b.EnvVars) > 0 {
				return sandbox.SandboxRecord{}, fmt.Errorf("envVars: a sandbox made from a snapshot keeps the snapshot's environment: %w",
					errdefs.ErrInvalidArgument)
			}
			return sb.Restore(ctx, b.TemplateID, sandbox.RestoreOptions{Lifecycle: life, Metadata: b.Metadata})
		}
	}
	names := []string{}
	for _, t := range sb.Templates() {
		names = append(names, t.Name)
	}
	return sandbox.SandboxRecord{}, fmt.Errorf("%w: template '%s' not found; the templates are %s (or a snapshot's id)",
		errdefs.ErrNotFound, b.TemplateID, strings.Join(names, ", "))
}

// filtered returns the visible sandboxes matching the query's metadata and state filters.
func (c *control) filtered(w http.ResponseWriter, r *http.Request, states []string) ([]sandbox.SandboxRecord, bool) {
	q := r.URL.Query()
	md, err := parseMetadata(q.Get("metadata"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return nil, false
	}
	for _, s := range states {
		if s != "running" && s != "paused" {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("state: %q: want running or paused", s))
			return nil, false
		}
	}
	recs, err := c.cfg.Sandboxes.List(r.Context())
	if err != nil {
		c.fail(w, err)
		return nil, false
	}
	tmpl := q.Get("template")
	out := recs[:0]
	for _, rec := range recs {
		if !visible(rec.State) || (len(states) > 0 && !slices.Contains(states, stateOf(rec.State))) ||
			(tmpl != "" && templateOf(rec) != tmpl) {
			continue
		}
		match := true
		for k, v := range md {
			if rec.Options.Metadata[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, rec)
		}
	}
	return out, true
}

// parseMetadata parses the metadata filter: "k=v&k2=v2", each key and value URL-encoded (the
// SDKs encode them before they encode the whole).
func parseMetadata(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(s)
	if err != nil {
		return nil, fmt.Errorf("metadata: %q: want key=value pairs joined by &: %w", s, err)
	}
	out := map[string]string{}
	for k, vs := range vals {
		dk, err1 := url.QueryUnescape(k)
		dv, err2 := url.QueryUnescape(vs[len(vs)-1])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("metadata: %q: a key or value is not URL-encoded", s)
		}
		out[dk] = dv
	}
	return out, nil
}

func (c *control) listV1(w http.ResponseWriter, r *http.Request) {
	recs, ok := c.filtered(w, r, []string{"running"})
	if !ok {
		return
	}
	out := make([]sandboxDetail, 0, len(recs))
	for _, rec := range recs {
		out = append(out, c.detail(rec, false))
	}
	writeJSON(w, http.StatusOK, out)
}

// listV2 is GET /v2/sandboxes: filters state (running,paused), metadata and template; order
// asc|desc by start; pages of limit (default 100) with the next page's offset in x-next-token.
func (c *control) listV2(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var states []string
	for _, v := range q["state"] {
		for s := range strings.SplitSeq(v, ",") {
			if s != "" {
				states = append(states, s)
			}
		}
	}
	recs, ok := c.filtered(w, r, states)
	if !ok {
		return
	}
	switch q.Get("order") {
	case "", "asc":
	case "desc":
		slices.Reverse(recs)
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("order: %q: want asc or desc", q.Get("order")))
		return
	}
	limit, from := 100, 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit: %q: want 1..1000", v))
			return
		}
		limit = n
	}
	if v := q.Get("nextToken"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("nextToken: %q: not a token this API gave", v))
			return
		}
		from = min(n, len(recs))
	}
	page := recs[from:min(from+limit, len(recs))]
	if from+limit < len(recs) {
		w.Header().Set("X-Next-Token", strconv.Itoa(from+limit))
	}
	out := make([]sandboxDetail, 0, len(page))
	for _, rec := range page {
		out = append(out, c.detail(rec, false))
	}
	writeJSON(w, http.StatusOK, out)
}

func (c *control) get(w http.ResponseWriter, r *http.Request) {
	if rec, ok := c.lookup(w, r); ok {
		writeJSON(w, http.StatusOK, c.detail(rec, true))
	}
}

// kill removes the sandbox (Remove drops its pause images).
func (c *control) kill(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	rec, err := c.cfg.Sandboxes.Get(r.Context(), id)
	if err == nil && !visible(rec.State) && !remains(rec.State) {
		err = fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		c.fail(w, err)
		return
	}
	if err := c.cfg.Sandboxes.Remove(r.Context(), rec.ID); err != nil {
		c.fail(w, err)
		return
	}
	if c.cfg.Removed != nil {
		c.cfg.Removed(rec.ID)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (c *control) setTimeout(w http.ResponseWriter, r *http.Request) {
	var b timeoutBody
	if !decode(w, r, &b) {
		return
	}
	if b.Timeout == nil {
		writeError(w, http.StatusBadRequest, "timeout: required (seconds)")
		return
	}
	c.retime(w, r, b.Timeout)
}

// retime gives a running sandbox a new timeout of secs seconds from now (nil: its own).
func (c *control) retime(w http.ResponseWriter, r *http.Request, secs *int) {
	rec, ok := c.lookup(w, r)
	if !ok {
		return
	}
	d, err := seconds("timeout", secs, rec.Options.Lifecycle.Timeout)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if _, err := c.cfg.Sandboxes.SetTimeout(r.Context(), rec.ID, d, ""); err != nil {
		c.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (c *control) refresh(w http.ResponseWriter, r *http.Request) {
	var b refreshBody
	if !decode(w, r, &b) {
		return
	}
	c.retime(w, r, b.Duration)
}

// connect answers a running sandbox (its deadline only ever moved later) and resumes a paused
// one (201).
func (c *control) connect(w http.ResponseWriter, r *http.Request) { c.connectWith(w, r, 0) }

// connectV2 is connect with ConnectSandboxV2's default timeout, 300 s.
func (c *control) connectV2(w http.ResponseWriter, r *http.Request) {
	c.connectWith(w, r, 300*time.Second)
}

func (c *control) connectWith(w http.ResponseWriter, r *http.Request, def time.Duration) {
	var b timeoutBody
	if !decode(w, r, &b) {
		return
	}
	rec, ok := c.lookup(w, r)
	if !ok {
		return
	}
	d, err := seconds("timeout", b.Timeout, def)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if rec.State == sandbox.Paused || rec.State == sandbox.Resuming {
		// Resume waits for a resume in progress; one that ended just before it started
		// leaves the sandbox running, which connect answers as below.
		next, rerr := c.cfg.Sandboxes.Resume(r.Context(), rec.ID, d)
		if rerr == nil {
			writeJSON(w, http.StatusCreated, c.sandboxBody(next))
			return
		}
		if rec, err = c.cfg.Sandboxes.Get(r.Context(), rec.ID); err != nil || rec.State != sandbox.Running {
			c.fail(w, rerr)
			return
		}
	}
	if d > 0 {
		if exp := rec.Options.Lifecycle.ExpiresAt; !exp.IsZero() && time.Until(exp) < d {
			if rec, err = c.cfg.Sandboxes.SetTimeout(r.Context(), rec.ID, d, ""); err != nil {
				c.fail(w, err)
				return
			}
		}
	}
	writeJSON(w, http.StatusOK, c.sandboxBody(rec))
}

func (c *control) resume(w http.ResponseWriter, r *http.Request) {
	var b timeoutBody
	if !decode(w, r, &b) {
		return
	}
	rec, ok := c.lookup(w, r)
	if !ok {
		return
	}
	d, err := seconds("timeout", b.Timeout, defaultTimeout)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if rec.State != sandbox.Paused {
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %s is already running", rec.ID))
		return
	}
	c.resumeWith(w, r, rec, d)
}

func (c *control) resumeWith(w http.ResponseWriter, r *http.Request, rec sandbox.SandboxRecord, d time.Duration) {
	rec, err := c.cfg.Sandboxes.Resume(r.Context(), rec.ID, d)
	if err != nil {
		c.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, c.sandboxBody(rec))
}

// pause checkpoints and stops the sandbox; 409 when it is paused already (the SDK's "false").
func (c *control) pause(w http.ResponseWriter, r *http.Request) {
	var b pauseBody
	if !decode(w, r, &b) {
		return
	}
	rec, ok := c.lookup(w, r)
	if !ok {
		return
	}
	if rec.State == sandbox.Paused {
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %s is already paused", rec.ID))
		return
	}
	if _, err := c.cfg.Sandboxes.Pause(r.Context(), rec.ID); err != nil {
		c.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// fork checkpoints the sandbox and restores count resealed children (Zygo's fork): 201 with
// one result per child, each the child or its error.
func (c *control) fork(w http.ResponseWriter, r *http.Request) {
	var b forkBody
	if !decode(w, r, &b) {
		return
	}
	n := 1
	if b.Count != nil {
		n = *b.Count
	}
	if n < 1 || n > c.cfg.Sandboxes.MaxFork() {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("count: %d: must be from 1 to %d", n, c.cfg.Sandboxes.MaxFork()))
		return
	}
	if _, err := seconds("timeout", b.Timeout, 0); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	parent, ok := c.lookup(w, r)
	if !ok {
		return
	}
	d, _ := seconds("timeout", b.Timeout, inheritedTimeout(parent, time.Now()))
	life := sandbox.Lifecycle{Timeout: d, OnTimeout: parent.Options.Lifecycle.OnTimeout}
	res, err := c.cfg.Sandboxes.Fork(r.Context(), parent.ID, sandbox.ForkOptions{N: n, Lifecycle: life})
	if err != nil && len(res.Children) == 0 {
		c.fail(w, err)
		return
	}
	out := make([]forkResult, 0, len(res.Children))
	for _, ch := range res.Children {
		if ch.Err != nil {
			out = append(out, forkResult{Error: &errorBody{Code: statusOf(ch.Err), Message: errdefs.Message(ch.Err)}})
			continue
		}
		sb := c.sandboxBody(ch.Sandbox)
		out = append(out, forkResult{Sandbox: &sb})
	}
	writeJSON(w, http.StatusCreated, out)
}

// inheritedTimeout is the timeout of a fork child whose request names none: the parent's
// remaining time to live (at least a second), as the child is a copy of the parent, or no
// timeout when the parent has none (made by Zygo's own API without one).
func inheritedTimeout(parent sandbox.SandboxRecord, now time.Time) time.Duration {
	exp := parent.Options.Lifecycle.ExpiresAt
	if exp.IsZero() {
		return 0
	}
	return max(exp.Sub(now).Round(time.Second), time.Second)
}

// snapshot takes a checkpoint (tagged with the name, else "snapshot"); the sandbox runs on.
func (c *control) snapshot(w http.ResponseWriter, r *http.Request) {
	var b snapshotRequest
	if !decode(w, r, &b) {
		return
	}
	rec, ok := c.lookup(w, r)
	if !ok {
		return
	}
	tag := b.Name
	if tag == "" {
		tag = snapshotTag
	}
	cp, err := c.cfg.Sandboxes.Checkpoint(r.Context(), rec.ID, tag)
	if err != nil {
		c.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotInfo{SnapshotID: cp.ID, Names: namesOf(cp)})
}

func namesOf(cp sandbox.CheckpointRecord) []string {
	if cp.Tag == "" {
		return []string{}
	}
	return []string{cp.Tag}
}

// listSnapshots lists checkpoints (not the pause images), filtered by sandboxID and name.
func (c *control) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	cps, err := c.cfg.Sandboxes.Checkpoints(r.Context(), q.Get("sandboxID"))
	if err != nil {
		c.fail(w, err)
		return
	}
	out := []snapshotInfo{}
	for _, cp := range cps {
		if cp.Tag == pauseTag || cp.Lost || (q.Get("name") != "" && cp.Tag != q.Get("name")) {
			continue
		}
		out = append(out, snapshotInfo{SnapshotID: cp.ID, Names: namesOf(cp)})
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteSnapshot removes a checkpoint (the SDK's deleteSnapshot calls DELETE /templates/ID).
func (c *control) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !strings.HasPrefix(id, "cp-") {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("template %q: templates are the daemon's (zygo serve --template); only snapshots (cp-…) are deleted here", id))
		return
	}
	if err := c.cfg.Sandboxes.RemoveCheckpoint(r.Context(), id); err != nil {
		c.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (c *control) templates(w http.ResponseWriter, _ *http.Request) {
	out := []templateBody{}
	for _, t := range c.cfg.Sandboxes.Templates() {
		out = append(out, templateBody{TemplateID: t.Name, BuildID: t.Name, Names: []string{t.Name}, Aliases: []string{t.Name},
			CPUCount: 1, MemoryMB: sandbox.DefaultMemoryMiB, EnvdVersion: c.cfg.EnvdVersion, BuildStatus: "ready"})
	}
	writeJSON(w, http.StatusOK, out)
}

// metrics: Zygo keeps no per-sandbox time series; a known sandbox answers an empty list.
func (c *control) metrics(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.lookup(w, r); ok {
		writeJSON(w, http.StatusOK, []struct{}{})
	}
}

// logs: a sandbox's own log lines are its runsc log on the host, not served; a known sandbox
// answers an empty list.
func (c *control) logs(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.lookup(w, r); ok {
		writeJSON(w, http.StatusOK, map[string][]struct{}{"logs": {}, "logEntries": {}})
	}
}
