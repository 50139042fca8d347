package api

// The routes of a sandbox's lifecycle beyond create and rm (routes.go has the table): pause,
// resume, a new timeout, a checkpoint restored into a new sandbox, and the templates.

import (
	"net/http"

	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	if !noBody(w, r) {
		return
	}
	rec, err := sb.Pause(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sandboxOf(rec))
}

func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	var body wire.ResumeBody
	if !decodeBody(w, r, &body) {
		return
	}
	rec, err := sb.Resume(r.Context(), r.PathValue("id"), millis(body.TimeoutMS))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sandboxOf(rec))
}

func (s *Server) setSandboxTimeout(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	var body wire.TimeoutBody
	if !decodeBody(w, r, &body) {
		return
	}
	rec, err := sb.SetTimeout(r.Context(), r.PathValue("id"), millis(body.TimeoutMS), body.OnTimeout)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sandboxOf(rec))
}

func (s *Server) restoreCheckpoint(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	var body wire.RestoreBody
	if !decodeBody(w, r, &body) {
		return
	}
	rec, err := sb.Restore(r.Context(), r.PathValue("id"), sandbox.RestoreOptions{Metadata: body.Metadata, Name: body.Name,
		Lifecycle: sandbox.Lifecycle{Timeout: millis(body.TimeoutMS), OnTimeout: body.OnTimeout}})
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, sandboxOf(rec))
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	q, ok := pageQueryOf(w, r)
	if !ok {
		return
	}
	var out []wire.Template
	for _, t := range sb.Templates() {
		out = append(out, wire.Template{Name: t.Name, RootfsDir: t.RootfsDir, Description: t.Description})
	}
	writePage(w, q, out, func(t wire.Template) string { return t.Name })
}
