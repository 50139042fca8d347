package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// decodeExecBody reads a wire.ExecBody and, with StdinStream, returns the rest of the body
// after the '\n' as the stdin. On failure it has answered.
func decodeExecBody(w http.ResponseWriter, r *http.Request) (wire.ExecBody, io.Reader, bool) {
	var body wire.ExecBody
	lim := &io.LimitedReader{R: r.Body, N: MaxSandboxJSONBytes}
	dec := json.NewDecoder(lim)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		if lim.N <= 0 {
			writeError(w, wire.ErrorBody{Code: wire.CodeTooLarge,
				Message: fmt.Sprintf("request body exceeds %d MiB", MaxSandboxJSONBytes>>20)})
			return body, nil, false
		}
		badRequest(w, "decoding request body: "+err.Error())
		return body, nil, false
	}
	if !body.StdinStream {
		if dec.More() {
			badRequest(w, "decoding request body: data after the JSON object (to stream stdin after it, set stdin_stream)")
			return body, nil, false
		}
		return body, nil, true
	}
	if body.Stdin != nil {
		badRequest(w, "stdin and stdin_stream exclude each other: send the input in the JSON or after it")
		return body, nil, false
	}
	// The JSON's reads went through lim; the rest of the body is not bounded.
	rest := bufio.NewReader(io.MultiReader(dec.Buffered(), r.Body))
	if c, err := rest.ReadByte(); err != nil || c != '\n' {
		badRequest(w, "with stdin_stream the JSON object must be followed by a newline, then the stdin")
		return body, nil, false
	}
	return body, rest, true
}

// bodyStdin is a streamed stdin read from the request body. A read error other than EOF means
// the client went away mid-request (HTTP/1 notices that only through the body while it is being
// read), so it cancels the exec.
type bodyStdin struct {
	r      io.Reader
	cancel context.CancelFunc
}

func (b *bodyStdin) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.cancel()
	}
	return n, err
}

func (s *Server) execSandbox(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	body, stdin, ok := decodeExecBody(w, r)
	if !ok {
		return
	}
	timeout, ok := timeoutOf(w, body.TimeoutMs)
	if !ok {
		return
	}
	ctx := r.Context()
	req := guest.ExecRequest{Argv: body.Argv, Env: body.Env, Cwd: body.Cwd, Timeout: timeout}
	if err := sandbox.ValidateExec(req); err != nil { // before the stream begins: a plain 400
		s.fail(w, err)
		return
	}
	switch {
	case stdin != nil:
		// An HTTP/1 server otherwise consumes the rest of the body before the answer begins.
		// HTTP/2 is full duplex already, and answers ErrNotSupported.
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex()
		// Once the exec is over, a read of the rest of the stdin (ours, or the server's drain
		// of the body after the handler) must not wait for a client that sends nothing and
		// stays connected: the deadline ends it, and the connection is not reused (what is
		// left of the body would be read as the next request).
		w.Header().Set("Connection", "close")
		defer func() { _ = rc.SetReadDeadline(time.Now()) }()
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		req.Stdin = &bodyStdin{r: stdin, cancel: cancel}
	case body.Stdin != nil:
		req.Stdin = bytes.NewReader(body.Stdin)
	}
	st := newEventStream(w)
	status, err := sb.Exec(ctx, r.PathValue("id"), req, st.writer("stdout"), st.writer("stderr"))
	if err != nil {
		s.finishStream(w, st, err)
		return
	}
	st.send(wire.StreamEvent{Exit: exitStatusOf(status)})
}
