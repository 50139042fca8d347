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
)

// ExecBody is the body of POST /v1/sandboxes/{id}/exec: one JSON object of at most
// MaxSandboxJSONBytes. The command's stdin comes in one of two forms, or not at all (then it
// is /dev/null):
//
//   - Stdin: the whole input, base64 in the JSON; the command starts once the body has
//     arrived. For small inputs.
//   - StdinStream: the JSON object is followed, in the same body, by one '\n' and then the
//     stdin bytes, sent as they come (chunked); the end of the body closes the command's
//     stdin. The command starts as soon as the object has arrived and its output streams back
//     while stdin is still being sent (the server reads the body while it answers: HTTP/1.1
//     full duplex). A client that goes away before the end of the body kills the command.
//
// Setting both is a 400.
type ExecBody struct {
	Argv        []string `json:"argv"`
	Env         []string `json:"env,omitempty"`   // KEY=VALUE, added to the sandbox's environment
	Cwd         string   `json:"cwd,omitempty"`   // default /
	Stdin       []byte   `json:"stdin,omitempty"` // base64 in JSON
	StdinStream bool     `json:"stdin_stream,omitempty"`
	TimeoutMs   int64    `json:"timeout_ms,omitempty"`
}

// decodeExecBody reads an ExecBody and, with StdinStream, returns the rest of the body after
// the '\n' as the stdin. On failure it has answered.
func decodeExecBody(w http.ResponseWriter, r *http.Request) (ExecBody, io.Reader, bool) {
	var body ExecBody
	lim := &io.LimitedReader{R: r.Body, N: MaxSandboxJSONBytes}
	dec := json.NewDecoder(lim)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		if lim.N <= 0 {
			writeError(w, http.StatusRequestEntityTooLarge, ErrorBody{Code: "too_large",
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
	st.send(StreamEvent{Exit: &status})
}
