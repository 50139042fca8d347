package envd

import (
	"compress/gzip"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/zygo-run/zygo/internal/errdefs"
)

const (
	// maxUploadBytes bounds the body of one upload (all its files).
	maxUploadBytes = 1 << 30
	// maxUploadFiles bounds the files of one multipart upload.
	maxUploadFiles = 1000
	// uploadPerm is the mode of an uploaded file: 0666 less the usual umask, as E2B's envd.
	uploadPerm = 0o644
)

// filesParams are the query parameters of /files (E2B's envd.yaml).
var filesParams = map[string]bool{"path": true, "username": true, "signature": true, "signature_expiration": true}

// filesQuery checks the caller of a /files request for operation ("read" or "write") and
// returns the user it names ("username", else DefaultUser) and its "path"
// (resolved, "" when absent). Unknown or repeated parameters are bad input.
func (s *Server) filesQuery(r *http.Request, id, operation string) (user, p string, err error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "", "", invalidf("query: %v", err)
	}
	for k, v := range q {
		switch {
		case !filesParams[k]:
			return "", "", invalidf("query parameter %q: unknown; want path, username, signature, signature_expiration", k)
		case len(v) > 1:
			return "", "", invalidf("query parameter %q: given %d times, want it once", k, len(v))
		}
	}
	if user, err = checkUser("username", q.Get("username")); err != nil {
		return "", "", err
	}
	if err := s.checkFiles(r.Context(), id, r.Header, q, operation); err != nil {
		return "", "", err
	}
	if q.Has("path") {
		if p, err = s.resolvePath(r.Context(), id, "path", q.Get("path"), user); err != nil {
			return "", "", err
		}
	}
	return user, p, nil
}

// download answers GET /files?path=: the file's bytes, streamed from the sandbox as they
// come, for as long as the request lasts. An error before the first byte is answered in
// E2B's shape (404 for a missing file); one after it aborts the response, so that the
// client sees a cut body, never a short file.
func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	id, err := sandboxIDFrom(r.Context())
	if err != nil {
		s.writeError(w, r, "", err)
		return
	}
	user, p, err := s.filesQuery(r, id, "read")
	if err == nil && p == "" {
		err = invalidf("query parameter path is missing: want the path of the file to download")
	}
	if err != nil {
		s.writeError(w, r, id, err)
		return
	}
	lw := &lazyWriter{w: w, name: path.Base(p)}
	if ug, ok := s.sb.(UserFileGetter); ok {
		err = ug.GetFileAs(r.Context(), id, p, user, lw)
	} else {
		err = s.sb.GetFile(r.Context(), id, p, lw)
	}
	if err != nil {
		if lw.started {
			s.log.Warn("envd: a download failed after its first byte", "sandbox_id", id, "path", p, "err", err)
			panic(http.ErrAbortHandler)
		}
		s.writeError(w, r, id, fmt.Errorf("file %s: %w", p, err))
		return
	}
	lw.start()
}

// lazyWriter sends the download's headers with its first byte, so that an error before it
// can still be answered as an error.
type lazyWriter struct {
	w       http.ResponseWriter
	name    string
	started bool
}

func (l *lazyWriter) start() {
	if l.started {
		return
	}
	l.started = true
	h := l.w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": l.name}))
	l.w.WriteHeader(http.StatusOK)
}

func (l *lazyWriter) Write(b []byte) (int, error) {
	l.start()
	return l.w.Write(b)
}

// uploaded is one entry of an upload's answer (E2B's EntryInfo of envd.yaml).
type uploaded struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// upload answers POST /files: a multipart/form-data body of "file" parts, each written to
// the path parameter or, without one, to the path its filename gives (relative to the
// user's home); or any other body, written whole to the path parameter. Missing parents
// are created; existing files are replaced. The answer lists the files written. A multipart
// upload is all or nothing (see uploadParts).
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	id, err := sandboxIDFrom(r.Context())
	if err != nil {
		s.writeError(w, r, "", err)
		return
	}
	user, p, err := s.filesQuery(r, id, "write")
	if err != nil {
		s.writeError(w, r, id, err)
		return
	}
	if err := checkUploadHeaders(r.Header); err != nil {
		s.writeError(w, r, "", err)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxUploadBytes)
	var body *capped // the inflating reader of a gzip body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			s.writeError(w, r, "", invalidf("body: Content-Encoding is gzip and the body is not: %v", err))
			return
		}
		defer zr.Close()
		body = &capped{r: zr, left: maxUploadBytes}
		r.Body = io.NopCloser(body)
	}
	var done []uploaded
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "multipart/form-data" {
		done, err = s.uploadParts(r, id, user, p)
	} else {
		if p == "" {
			err = invalidf("query parameter path is missing: a %s body is one file, written to path", orOctet(mt))
		} else if err = s.put(r, id, user, p, r.Body); err == nil {
			done = append(done, uploaded{Path: p, Name: path.Base(p), Type: TypeFile})
		}
	}
	if err != nil && body != nil && body.err != nil {
		// The guest saw the body end early; the cause is the client's gzip stream.
		err = body.err
	}
	if err != nil {
		s.writeError(w, r, id, uploadError(err))
		return
	}
	writeJSON(w, http.StatusOK, done)
}

func orOctet(mt string) string {
	if mt == "" {
		return "application/octet-stream"
	}
	return mt
}

// capped reads r and fails with errdefs.ErrTooLarge past left bytes: it bounds what a
// gzip body inflates to, which MaxBytesReader (on the compressed bytes) does not.
type capped struct {
	r    io.Reader
	left int64
	// err is the first error of r but EOF: a cut or corrupt gzip stream (bad input,
	// naming the body), or the bound.
	err error
}

func (c *capped) Read(b []byte) (int, error) {
	if c.left <= 0 {
		if c.err == nil {
			c.err = fmt.Errorf("upload body inflates to over %d bytes: %w", int64(maxUploadBytes), errdefs.ErrTooLarge)
		}
		return 0, c.err
	}
	if int64(len(b)) > c.left {
		b = b[:c.left]
	}
	n, err := c.r.Read(b)
	c.left -= int64(n)
	if err != nil && !errors.Is(err, io.EOF) && c.err == nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			c.err = err
		} else {
			c.err = invalidf("body: the gzip stream (Content-Encoding: gzip) is cut short or corrupt: %v", err)
		}
	}
	return n, err
}

// checkUploadHeaders refuses what an upload asks that Zygo would otherwise drop: file
// metadata (E2B's X-Metadata-* headers, kept as extended attributes) and encodings other
// than gzip.
func checkUploadHeaders(h http.Header) error {
	for k := range h {
		if strings.HasPrefix(k, "X-Metadata-") {
			return unsupportedf("header %s: file metadata (extended attributes) is not kept by Zygo", k)
		}
	}
	switch enc := h.Get("Content-Encoding"); enc {
	case "", "identity", "gzip":
		return nil
	default:
		return invalidf("header Content-Encoding %q: want gzip or none", enc)
	}
}

// uploadError names a body over maxUploadBytes as such.
func uploadError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fmt.Errorf("upload body is over %d bytes: %w", mbe.Limit, errdefs.ErrTooLarge)
	}
	return err
}

// uploadParts writes the "file" parts of a multipart body; dest is the path parameter ("":
// each part's filename names its path). When the backend is a FileReplacer the upload is all
// or nothing: each part is written to a hidden file beside its target (as user), and only
// once every part is in are they renamed over their targets; on any error the staged files
// are removed and no target is touched (parent directories the staging made stay). The
// error names the part that failed.
func (s *Server) uploadParts(r *http.Request, id, user, dest string) ([]uploaded, error) {
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, invalidf("body: %v", err)
	}
	fr, staged := s.sb.(FileReplacer)
	tag := rand.Text()[:12]
	var done []uploaded
	var stages []string // stages[i] is where done[i] is staged
	unstage := func() {
		ctx := context.WithoutCancel(r.Context())
		for _, st := range stages {
			if err := s.sb.RemovePath(ctx, id, st); err != nil {
				s.log.Warn("envd: removing a staged upload part", "sandbox_id", id, "path", st, "err", err)
			}
		}
	}
	fail := func(err error) ([]uploaded, error) {
		if staged {
			unstage()
			return nil, err
		}
		return done, err
	}
	for n := 0; ; n++ {
		part, err := mr.NextRawPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if e := uploadError(err); errors.Is(e, errdefs.ErrTooLarge) {
				return fail(fmt.Errorf("body: part %d: %w", n, e))
			}
			return fail(invalidf("body: part %d: %v", n, err))
		}
		if part.FormName() != "file" {
			_ = part.Close()
			return fail(invalidf("body: part %d is named %q: want \"file\"", n, part.FormName()))
		}
		if n >= maxUploadFiles {
			_ = part.Close()
			return fail(invalidf("body: part %d: the body has more than %d files", n, maxUploadFiles))
		}
		p, err := s.partPath(r.Context(), id, part, n, dest, user)
		to := p
		if err == nil && staged {
			to = path.Join(path.Dir(p), fmt.Sprintf(".zygo-upload-%s-%d", tag, n))
		}
		if err == nil {
			err = s.put(r, id, user, to, part)
			if err != nil {
				err = fmt.Errorf("body: part %d: %w", n, err)
			}
		}
		_ = part.Close()
		if err != nil {
			return fail(err)
		}
		if staged {
			stages = append(stages, to)
		}
		done = append(done, uploaded{Path: p, Name: path.Base(p), Type: TypeFile})
	}
	if len(done) == 0 {
		return nil, invalidf("body has no part named \"file\"")
	}
	for i, st := range stages {
		if err := fr.ReplaceFile(r.Context(), id, st, done[i].Path); err != nil {
			// Renames before this one are done (each replaces its target whole); the rest
			// are undone.
			stages = stages[i:]
			unstage()
			return nil, fmt.Errorf("body: part %d: moving it to %s (parts before it are written, none after): %w", i, done[i].Path, err)
		}
	}
	return done, nil
}

// partPath is where part n goes: dest when set, else the path its filename gives (the raw
// parameter: mime/multipart's FileName keeps only the base name).
func (s *Server) partPath(ctx context.Context, id string, part *multipart.Part, n int, dest, user string) (string, error) {
	if dest != "" {
		if n > 0 {
			return "", invalidf("body: part %d: the query's path names one file, and the body has more; name each by its filename instead", n)
		}
		return dest, nil
	}
	_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	if err != nil || params["filename"] == "" {
		return "", invalidf("body: part %d has no filename and the query no path: want one of them to name the file", n)
	}
	return s.resolvePath(ctx, id, fmt.Sprintf("body: part %d: filename", n), params["filename"], user)
}

// put writes body to p, owned by user when the backend can.
func (s *Server) put(r *http.Request, id, user, p string, body io.Reader) error {
	var err error
	if op, ok := s.sb.(OwnedFilePutter); ok {
		err = op.PutFileAs(r.Context(), id, p, uploadPerm, user, body)
	} else {
		err = s.sb.PutFile(r.Context(), id, p, uploadPerm, body)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", p, uploadError(err))
	}
	return nil
}
