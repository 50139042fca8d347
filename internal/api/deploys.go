package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// answerDeploy runs a deploy or rollback and answers it: plain JSON (201 DeployResult, 200
// when unchanged, or the error), or, when the client asks with Accept: wire.DeployStreamType,
// a wire.DeployEvent per step and a last one with the result or error. The stream's 200 goes
// out with the first step after the bundle was checked (unpacking, or importing for a
// rollback), so a refused bundle still gets its own status.
func (s *Server) answerDeploy(w http.ResponseWriter, r *http.Request, run func(context.Context) (*function.DeployResult, error)) {
	ctx := r.Context()
	var st *deployStream
	if r.Header.Get("Accept") == wire.DeployStreamType {
		st = &deployStream{w: w, rc: http.NewResponseController(w)}
		ctx = function.WithProgress(ctx, st.progress)
	}
	res, err := run(ctx)
	if st == nil || !st.isStarted() {
		if err != nil {
			s.failDeploy(w, err)
			return
		}
		writeJSON(w, deployStatus(res), deployResultOf(res))
		return
	}
	if err != nil {
		e := s.deployError(err)
		st.send(wire.DeployEvent{Error: &e, Status: wire.StatusOf(e.Code)})
		return
	}
	out := deployResultOf(res)
	st.send(wire.DeployEvent{Result: &out, Status: deployStatus(res)})
}

func deployStatus(res *function.DeployResult) int {
	if res.Unchanged {
		return http.StatusOK
	}
	return http.StatusCreated
}

// deployError is the error body of a failed deploy or rollback: an import failure with its
// outcome, type and traceback; any other error by its category.
func (s *Server) deployError(err error) wire.ErrorBody {
	var ife *function.ImportFailed
	if errors.As(err, &ife) {
		return wire.ErrorBody{Code: wire.CodeImportFailed, Type: ife.Type,
			Message: ife.Outcome() + ": " + ife.Type + ": " + ife.Message, Traceback: ife.Traceback}
	}
	return *s.errorBody(err)
}

func (s *Server) failDeploy(w http.ResponseWriter, err error) {
	var ife *function.ImportFailed
	if errors.As(err, &ife) {
		writeError(w, s.deployError(err))
		return
	}
	s.fail(w, err)
}

// deployStream writes wire.DeployEvents. Steps before unpacking (uploading) are held back
// and sent with the first later one, when the bundle has been checked.
type deployStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController

	mu      sync.Mutex // guards held, started and the writes
	held    []wire.DeployEvent
	started bool
}

func (st *deployStream) progress(p function.Progress) {
	ev := wire.DeployEvent{Step: string(p.Step), Version: p.Version}
	for _, c := range p.Checks {
		ev.Checks = append(ev.Checks, wire.Check{Name: c.Name, Level: c.Level, Detail: c.Detail})
	}
	if p.Step == function.StepUploading {
		st.mu.Lock()
		st.held = append(st.held, ev)
		st.mu.Unlock()
		return
	}
	st.send(ev)
}

func (st *deployStream) send(ev wire.DeployEvent) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.started {
		st.w.Header().Set("Content-Type", wire.DeployStreamType)
		st.w.WriteHeader(http.StatusOK)
		st.started = true
	}
	enc := json.NewEncoder(st.w)
	for _, h := range st.held {
		_ = enc.Encode(h)
	}
	st.held = nil
	_ = enc.Encode(ev)
	_ = st.rc.Flush()
}

func (st *deployStream) isStarted() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.started
}

func (s *Server) rollbackFunction(w http.ResponseWriter, r *http.Request) {
	var body wire.RollbackFunctionBody
	if !decodeBody(w, r, &body) {
		return
	}
	name := r.PathValue("name")
	s.answerDeploy(w, r, func(ctx context.Context) (*function.DeployResult, error) {
		return s.fns.Rollback(ctx, name, body.To)
	})
}

func (s *Server) versions(w http.ResponseWriter, r *http.Request) {
	limit, offset, ok := pageParams(w, r)
	if !ok {
		return
	}
	vs, err := s.fns.Versions(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, err)
		return
	}
	page := wire.VersionsPage{Items: []wire.Version{}}
	for _, v := range vs[min(offset, len(vs)):min(offset+limit, len(vs))] {
		page.Items = append(page.Items, wire.Version{Hash: v.Hash, CreatedAt: v.CreatedAt, DeployedAt: v.DeployedAt, Active: v.Active})
	}
	if offset+limit < len(vs) {
		page.NextCursor = encodeCursor(offset + limit)
	}
	writePage(w, page)
}

// Bounds of a list's ?limit= (docs/protocol.md, Lists).
const (
	defaultPageLimit = 100
	maxPageLimit     = 1000
)

// pageParams reads ?limit= and ?cursor= (an offset into the list, opaque to clients); on a
// bad one it has answered 400 naming it.
func pageParams(w http.ResponseWriter, r *http.Request) (limit, offset int, ok bool) {
	limit = defaultPageLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageLimit {
			badRequest(w, fmt.Sprintf("limit: %q is not an integer in 1..%d", v, maxPageLimit))
			return 0, 0, false
		}
		limit = n
	}
	if c := r.URL.Query().Get("cursor"); c != "" {
		n, err := decodeCursor(c)
		if err != nil {
			badRequest(w, fmt.Sprintf("cursor: %q is not a cursor this list gave (pass next_cursor as it is)", c))
			return 0, 0, false
		}
		offset = n
	}
	return limit, offset, true
}

func encodeCursor(offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("o" + strconv.Itoa(offset)))
}

func decodeCursor(c string) (int, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) < 2 || b[0] != 'o' {
		return 0, errors.New("malformed cursor")
	}
	n, err := strconv.Atoi(string(b[1:]))
	if err != nil || n < 0 {
		return 0, errors.New("malformed cursor")
	}
	return n, nil
}

// writePage answers a page of a list (wire.VersionsPage and its kind: {"items": [...],
// "next_cursor": "..."}). Branch apispec has the shared helper; this one is merged into it.
func writePage(w http.ResponseWriter, page any) { writeJSON(w, http.StatusOK, page) }
