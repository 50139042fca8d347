package api

// The routes that move a checkpoint image between daemons (routes.go has the table):
// GET /v1/checkpoints/{id}/image streams it, POST /v1/checkpoints/import reads one as a new
// checkpoint (sandbox.ExportCheckpoint, sandbox.ImportCheckpoint).

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// exportCheckpoint answers the image's tar. Its size and SHA-256 are headers, known before
// the body; a failure once the body began (a file that no longer matches its checksum, the
// caller gone, or a caller that reads nothing for s.stall: the export holds a lease that keeps
// the checkpoint from removal) aborts the connection, so the receiver sees a cut stream,
// never a short one that looks whole.
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
	rc := http.NewResponseController(w)
	defer rc.SetWriteDeadline(time.Time{}) //nolint:errcheck // best effort: the connection may be reused
	if err := e.Write(r.Context(), &stallWriter{w: w, rc: rc, d: s.stallTimeout()}); err != nil {
		s.log.Warn("exporting a checkpoint image failed mid-stream", "checkpoint", e.Checkpoint.ID, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// importCheckpoint reads the body, an export tar, as a new checkpoint: ?sha256= (required)
// is the stream's SHA-256 as its exporter announced it, ?tag= the new checkpoint's tag
// (default the image's). A body from which no byte arrives for s.stall ends the import
// (sandbox.ImportCheckpoint then leaves nothing behind).
func (s *Server) importCheckpoint(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	if !onlyQuery(w, r, "sha256", "tag") {
		return
	}
	q := r.URL.Query()
	if q.Get("sha256") == "" {
		badRequest(w, "sha256: missing: give the image's SHA-256 (its exporter's "+wire.ImageSHA256Header+" header) as ?sha256=")
		return
	}
	rc := http.NewResponseController(w)
	body := &stallReader{r: r.Body, rc: rc, d: s.stallTimeout()}
	cp, err := sb.ImportCheckpoint(r.Context(), body, sandbox.ImportOptions{SHA256: q.Get("sha256"), Tag: q.Get("tag")})
	_ = rc.SetReadDeadline(time.Time{})
	if err != nil && body.stalled {
		s.fail(w, fmt.Errorf("the image's body stalled: no byte for %s (%s): %w", s.stallTimeout(), errdefs.Message(err), errdefs.ErrDeadlineExceeded))
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, checkpointOf(cp))
}

// stallWriter renews the connection's write deadline before each write: a reader that takes
// no byte for d fails the write, and so the export.
type stallWriter struct {
	w  io.Writer
	rc *http.ResponseController
	d  time.Duration
}

func (s *stallWriter) Write(p []byte) (int, error) {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.d)) // an error: the writer cannot; it writes unbounded
	return s.w.Write(p)
}

// stallReader renews the connection's read deadline before each read: a body that sends no
// byte for d fails the read, and so the import.
type stallReader struct {
	r       io.Reader
	rc      *http.ResponseController
	d       time.Duration
	stalled bool // a read failed past its deadline
}

func (s *stallReader) Read(p []byte) (int, error) {
	_ = s.rc.SetReadDeadline(time.Now().Add(s.d))
	n, err := s.r.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		s.stalled = true
	}
	return n, err
}

// stallTimeout is s.stall or its default.
func (s *Server) stallTimeout() time.Duration {
	if s.stall > 0 {
		return s.stall
	}
	return sandbox.ExportStallTimeout
}
