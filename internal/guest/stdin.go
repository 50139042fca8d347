package guest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/net/http2"
)

// Streamed stdin on the channel.
//
// POST /v1/exec carries its ExecRequest as one JSON object. When the caller gives a Stdin, the
// object has "stdin_stream": true and is followed, in the same request body, by one '\n' and
// then the stdin bytes as they are read, until the body ends (which closes the command's
// stdin). HTTP/2 is full duplex, so the command starts as soon as the object has arrived and
// its output comes back while stdin is still being sent. The agent answers with the header
// StdinHeader: stdinStreamed when it accepted a streamed stdin, so a host talking to an agent
// that predates streaming (one restored from an old checkpoint image, which would run the
// command on /dev/null) fails the call instead of losing the input.

const (
	// stdinHeader is the answer header with which the agent acknowledges a streamed stdin.
	stdinHeader   = "Zygo-Stdin"
	stdinStreamed = "stream"
)

// Flow control of the agent's HTTP/2 server. A request body the handler does not read (the
// stdin of a command that is not reading it) holds its stream's receive window; the
// connection's window must cover every stream's at once, or one stalled stdin would stop every
// other request body on the channel (files, the next exec's JSON). Memory stays bounded:
// at most maxChannelStreams × stdinWindowBytes buffered in the agent.
const (
	// stdinWindowBytes is the per-stream receive window: what a command's stdin may hold in the
	// agent, beyond its pipe (64 KiB), before the host is told to wait.
	stdinWindowBytes = 256 << 10
	// maxChannelStreams bounds the calls in flight on one channel (x/net/http2's default).
	maxChannelStreams = 250
)

// newChannelServer returns the HTTP/2 server the agent runs on each host connection.
func newChannelServer() *http2.Server {
	return &http2.Server{
		ReadIdleTimeout:              10 * time.Second,
		PingTimeout:                  5 * time.Second,
		MaxConcurrentStreams:         maxChannelStreams,
		MaxUploadBufferPerStream:     stdinWindowBytes,
		MaxUploadBufferPerConnection: maxChannelStreams * stdinWindowBytes,
	}
}

// execWire is ExecRequest as it travels on the channel.
type execWire struct {
	ExecRequest
	StdinStream bool `json:"stdin_stream,omitempty"`
}

// execBody returns the request body of POST /v1/exec for req: the JSON object, then, when
// req.Stdin is set, '\n' and req.Stdin. With a Stdin the body is a pipe fed by a goroutine
// that copies req.Stdin, and closing the body closes the pipe: the HTTP/2 transport closes it
// when the call ends, and waits for its body writer before a response body's Close returns,
// so that writer must never be stuck in a Read of req.Stdin (which may never return). The
// goroutine stays in such a Read until it returns and drops what it gets. req.Stdin itself is
// never closed. A read error of req.Stdin other than EOF is passed to fail before it ends the
// body (Exec cancels the call with it, so the failed request is not taken for a broken
// connection).
func execBody(req ExecRequest, fail func(error)) (io.Reader, error) {
	b, err := json.Marshal(execWire{ExecRequest: req, StdinStream: req.Stdin != nil})
	if err != nil {
		return nil, fmt.Errorf("encoding request: %w", err)
	}
	if req.Stdin == nil {
		return bytes.NewReader(b), nil
	}
	pr, pw := io.Pipe()
	go copyStdin(pw, req.Stdin, fail)
	return &stdinBody{Reader: io.MultiReader(bytes.NewReader(append(b, '\n')), pr), pr: pr}, nil
}

// copyStdin copies r to pw until r ends (EOF closes pw) or pw is closed by the reader. A read
// error other than EOF goes to fail, then closes pw with it.
func copyStdin(pw *io.PipeWriter, r io.Reader, fail func(error)) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := pw.Write(buf[:n]); werr != nil {
				return // the call is over
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			pw.Close()
			return
		case err != nil:
			fail(err)
			pw.CloseWithError(err)
			return
		}
	}
}

// stdinBody is an exec request body with a streamed stdin; Close abandons the stdin.
type stdinBody struct {
	io.Reader
	pr *io.PipeReader
}

func (b *stdinBody) Close() error { return b.pr.CloseWithError(errors.New("exec ended")) }

// decodeExecBody reads the ExecRequest at the start of body; with a streamed stdin, its Stdin
// is the rest of body after the '\n'.
func decodeExecBody(body io.Reader) (ExecRequest, error) {
	dec := json.NewDecoder(body)
	var w execWire
	if err := dec.Decode(&w); err != nil {
		return ExecRequest{}, err
	}
	if !w.StdinStream {
		return w.ExecRequest, nil
	}
	rest := bufio.NewReader(io.MultiReader(dec.Buffered(), body))
	if c, err := rest.ReadByte(); err != nil || c != '\n' {
		return ExecRequest{}, errors.New("a streamed stdin must follow the JSON object after one newline")
	}
	w.Stdin = rest
	return w.ExecRequest, nil
}

// stdinError is a read error of an exec's Stdin: the call is abandoned and its command killed.
type stdinError struct{ err error }

func (e *stdinError) Error() string { return "reading stdin: " + e.err.Error() }
func (e *stdinError) Unwrap() error { return e.err }
