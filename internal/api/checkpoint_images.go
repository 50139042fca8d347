package api

// The routes that move a checkpoint image between daemons (routes.go has the table):
// GET /v1/checkpoints/{id}/image streams it, POST /v1/checkpoints/import reads one as a new
// checkpoint (sandbox.ExportCheckpoint, sandbox.ImportCheckpoint).

import (
	"net/http"
	"strconv"

	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// exportCheckpoint answers the image's tar. Its size and SHA-256 are headers, known before
// the body; a failure once the body began (a file that no longer matches its checksum, the
// caller gone) aborts the connection, so the receiver sees a cut stream, never a short one
// that looks whole.
func (s *Server) exportCheckpoint(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	e, err := sb.ExportCheckpoint(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	defer e.Close()
	h := w.Header()
	h.Set("Content-Type", wire.TarContentType)
	h.Set("Content-Length", strconv.FormatInt(e.Size, 10))
	h.Set(wire.ImageSHA256Header, e.SHA256)
	h.Set(wire.ImageCheckpointHeader, e.Checkpoint.ID)
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	if err := e.Write(r.Context(), w); err != nil {
		s.log.Warn("exporting a checkpoint image failed mid-stream", "checkpoint", e.Checkpoint.ID, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// importCheckpoint reads the body, an export tar, as a new checkpoint: ?sha256= (required)
// is the stream's SHA-256 as its exporter announced it, ?tag= the new checkpoint's tag
// (default the image's).
func (s *Server) importCheckpoint(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	q := r.URL.Query()
	if q.Get("sha256") == "" {
		badRequest(w, "sha256: missing: give the image's SHA-256 (its exporter's "+wire.ImageSHA256Header+" header) as ?sha256=")
		return
	}
	cp, err := sb.ImportCheckpoint(r.Context(), r.Body, sandbox.ImportOptions{SHA256: q.Get("sha256"), Tag: q.Get("tag")})
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, checkpointOf(cp))
}
