package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
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
	if err != nil {
		s.log.Info("deploy failed", "err", err)
	}
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
	q, ok := pageQueryOf(w, r)
	if !ok {
		return
	}
	vs, err := s.fns.Versions(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, err)
		return
	}
	items := make([]wire.Version, 0, len(vs))
	for _, v := range vs {
		items = append(items, wire.Version{Hash: v.Hash, CreatedAt: v.CreatedAt, DeployedAt: v.DeployedAt, Active: v.Active})
	}
	writePage(w, q, items, newestFirstKey)
}

// newestFirstKey orders versions by DeployedAt, the most recent first (then by hash): the
// time's nanoseconds subtracted from the largest int64, zero-padded.
func newestFirstKey(v wire.Version) string {
	return fmt.Sprintf("%019d %s", math.MaxInt64-v.DeployedAt.UnixNano(), v.Hash)
}
