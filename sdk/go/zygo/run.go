package zygo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// ExecOptions are the optional parts of an exec.
type ExecOptions struct {
	Env []string // KEY=VALUE added to the sandbox's environment
	Cwd string   // default /
	// Stdin, when not nil, is streamed to the command's stdin while it runs: the command
	// starts at once, gets each chunk as Read returns it, and sees EOF when Stdin does (a read
	// error other than EOF abandons the call and kills the command). Memory stays bounded
	// whatever its size. nil: the command's stdin is /dev/null. Exec never closes Stdin; when
	// the command exits before Stdin's EOF, Exec returns without waiting for it, and one Read
	// may still be in flight then (what it returns is dropped). For a []byte, pass
	// bytes.NewReader(b).
	Stdin   io.Reader
	Timeout time.Duration // then SIGTERM to the command's process group, SIGKILL 2 s later; 0: until ctx ends
	// Stdout and Stderr, when set, receive the output as it arrives (it is also in the result).
	Stdout, Stderr io.Writer
}

// ExecResult is how a command ended and what it printed.
type ExecResult struct {
	ExitCode int    `json:"code"`             // 128+N when killed by signal N
	Signal   int    `json:"signal,omitempty"` // the signal that killed it, or 0
	TimedOut bool   `json:"timed_out,omitempty"`
	Stdout   []byte `json:"-"`
	Stderr   []byte `json:"-"`
}

// CodeResult is the outcome of RunCode. A Python exception is OK false with its traceback in
// Error, not a Go error: the interpreter and its variables survive it.
type CodeResult struct {
	OK    bool   `json:"ok"`
	Value string `json:"value,omitempty"` // repr of the last statement when it is an expression
	Error string `json:"error,omitempty"`
	// OutputTruncated: the code printed more than 16 MiB; the rest was discarded (a marker on
	// stderr shows where) while the code kept running.
	OutputTruncated bool `json:"output_truncated,omitempty"`
	// Restarted: the interpreter died under the call (the code ignored a timeout's
	// KeyboardInterrupt for 2 s and was killed, or it exited); its variables are lost and the
	// next call starts a fresh interpreter.
	Restarted bool   `json:"restarted,omitempty"`
	Stdout    string `json:"-"`
	Stderr    string `json:"-"`
}

// event is one line of the daemon's streamed answer.
type event struct {
	Stream string      `json:"stream,omitempty"`
	Data   []byte      `json:"data,omitempty"`
	Exit   *ExecResult `json:"exit,omitempty"`
	Result *CodeResult `json:"result,omitempty"`
	Error  *Error      `json:"error,omitempty"`
}

// stream posts in and reads events until the last, copying output to the buffers and writers.
func (c *Client) stream(ctx context.Context, path string, in any, outB, errB *bytes.Buffer, outW, errW io.Writer) (event, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return event{}, err
	}
	return c.streamBody(ctx, path, bytes.NewReader(b), "application/json", outB, errB, outW, errW)
}

// streamBody is stream with the request body given.
func (c *Client) streamBody(ctx context.Context, path string, body io.Reader, ctype string, outB, errB *bytes.Buffer, outW, errW io.Writer) (event, error) {
	resp, err := c.do(ctx, "POST", path, body, ctype)
	if err != nil {
		return event{}, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev event
		if err := dec.Decode(&ev); err != nil {
			return event{}, fmt.Errorf("reading the daemon's answer: %w", err)
		}
		switch {
		case ev.Error != nil:
			return event{}, ev.Error
		case ev.Exit != nil || ev.Result != nil:
			return ev, nil
		case ev.Stream == "stdout":
			outB.Write(ev.Data)
			if outW != nil {
				outW.Write(ev.Data)
			}
		case ev.Stream == "stderr":
			errB.Write(ev.Data)
			if errW != nil {
				errW.Write(ev.Data)
			}
		}
	}
}

// Exec runs argv in the sandbox and returns how it ended. A command that cannot start (a
// missing binary) is an error for which IsNotFound is true, not an exit code.
func (sb *Sandbox) Exec(ctx context.Context, argv []string, opts *ExecOptions) (ExecResult, error) {
	if opts == nil {
		opts = &ExecOptions{}
	}
	req := map[string]any{"argv": argv, "env": opts.Env, "cwd": opts.Cwd,
		"timeout_ms": opts.Timeout.Milliseconds()}
	var body io.Reader
	if opts.Stdin != nil {
		// The JSON, a newline, then the stdin as it is read (the API's stdin_stream form).
		req["stdin_stream"] = true
		b, err := json.Marshal(req)
		if err != nil {
			return ExecResult{}, err
		}
		// MultiReader hides Stdin's Close from the transport, which closes request bodies.
		body = io.MultiReader(bytes.NewReader(append(b, '\n')), opts.Stdin)
	} else {
		b, err := json.Marshal(req)
		if err != nil {
			return ExecResult{}, err
		}
		body = bytes.NewReader(b)
	}
	var out, errb bytes.Buffer
	ev, err := sb.c.streamBody(ctx, sbPath(sb.ID, "exec"), body, "application/octet-stream", &out, &errb, opts.Stdout, opts.Stderr)
	if err != nil {
		return ExecResult{}, err
	}
	if ev.Exit == nil {
		return ExecResult{}, fmt.Errorf("exec answer without an exit status")
	}
	res := *ev.Exit
	res.Stdout, res.Stderr = out.Bytes(), errb.Bytes()
	return res, nil
}

// RunCode runs Python source in the sandbox's persistent interpreter: variables survive
// between calls and are carried into forks (with random generators reseeded in each copy).
// ctx bounds the call: when it ends the code is interrupted (KeyboardInterrupt), and an
// interpreter that does not stop within 2 s is killed, and the next call starts a fresh one
// (the variables are lost). A call whose interpreter died under it answers with
// CodeResult.Restarted. Output beyond 16 MiB is cut (CodeResult.OutputTruncated).
func (sb *Sandbox) RunCode(ctx context.Context, code string) (CodeResult, error) {
	var out, errb bytes.Buffer
	ev, err := sb.c.stream(ctx, sbPath(sb.ID, "run-code"), map[string]any{"code": code}, &out, &errb, nil, nil)
	if err != nil {
		return CodeResult{}, err
	}
	if ev.Result == nil {
		return CodeResult{}, fmt.Errorf("run-code answer without a result")
	}
	res := *ev.Result
	res.Stdout, res.Stderr = out.String(), errb.String()
	return res, nil
}
