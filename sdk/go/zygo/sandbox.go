package zygo

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"time"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// CreateOptions are chosen at create; forks and rollbacks inherit them (see
// wire.CreateSandboxBody for each field's bounds).
type CreateOptions = wire.CreateSandboxBody

// Service is a long-lived process a sandbox starts at boot.
type Service = wire.Service

// Checkpoint is an immutable image of a sandbox at one moment.
type Checkpoint = wire.Checkpoint

// FileInfo describes one directory entry inside a sandbox.
type FileInfo = wire.FileInfo

// MaxForkN is the daemon's default bound on Fork's n (a larger n is refused with IsBadRequest).
const MaxForkN = wire.MaxForkN

// Sandbox is a sandbox's record at the time it was read, and the handle to act on it.
type Sandbox struct {
	wire.Sandbox
	c *Client
}

// Sandbox returns a handle on the sandbox with that id or name without asking the daemon;
// only its ID is set.
func (c *Client) Sandbox(idOrName string) *Sandbox {
	return &Sandbox{Sandbox: wire.Sandbox{ID: idOrName}, c: c}
}

// Create starts a sandbox and returns it once its guest agent answers.
func (c *Client) Create(ctx context.Context, opts CreateOptions) (*Sandbox, error) {
	rec, err := c.CreateSandbox(ctx, opts)
	return &Sandbox{Sandbox: rec, c: c}, err
}

// Get returns the sandbox with that id or name.
func (c *Client) Get(ctx context.Context, idOrName string) (*Sandbox, error) {
	rec, err := c.GetSandbox(ctx, idOrName)
	return &Sandbox{Sandbox: rec, c: c}, err
}

// List returns every sandbox, oldest first.
func (c *Client) List(ctx context.Context) ([]*Sandbox, error) {
	recs, err := c.ListSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*Sandbox, len(recs))
	for i, r := range recs {
		out[i] = &Sandbox{Sandbox: r, c: c}
	}
	return out, nil
}

// Remove destroys the sandbox. Its checkpoints stay.
func (sb *Sandbox) Remove(ctx context.Context) error { return sb.c.RemoveSandbox(ctx, sb.ID) }

// CurrentGeneration asks the daemon for the sandbox's generation now (sb.Generation is the one
// it had when sb was read).
func (sb *Sandbox) CurrentGeneration(ctx context.Context) (string, error) {
	g, err := sb.c.Generation(ctx, sb.ID)
	return g.Generation, err
}

// ExecOptions are the optional parts of an exec.
type ExecOptions struct {
	Env []string // KEY=VALUE added to the sandbox's environment
	Cwd string   // default /
	// Stdin, when not nil, is streamed to the command's stdin while it runs: the command
	// starts at once, gets each chunk as Read returns it, and sees EOF when Stdin does (a read
	// error other than EOF abandons the call and kills the command). Memory stays bounded
	// whatever its size. nil: the command's stdin is /dev/null. Exec never closes Stdin; when
	// the command exits before Stdin's EOF, Exec returns without waiting for it, and one Read
	// may still be in flight then (what it returns is dropped).
	Stdin   io.Reader
	Timeout time.Duration // then SIGTERM to the command's process group, SIGKILL 2 s later; 0: until ctx ends
	// Stdout and Stderr, when set, receive the output as it arrives (it is also in the result).
	Stdout, Stderr io.Writer
}

// ExecResult is how a command ended and what it printed.
type ExecResult struct {
	ExitCode int  // 128+N when killed by signal N
	Signal   int  // the signal that killed it, or 0
	TimedOut bool // killed at ExecOptions.Timeout
	Stdout   []byte
	Stderr   []byte
}

// CodeResult is the outcome of RunCode and what the code printed. A Python exception is OK
// false with its traceback in Error, not a Go error: the interpreter and its variables survive.
type CodeResult struct {
	wire.CodeResult
	Stdout string
	Stderr string
}

// tee returns a writer to buf and to w when w is not nil.
func tee(buf *bytes.Buffer, w io.Writer) io.Writer {
	if w == nil {
		return buf
	}
	return io.MultiWriter(buf, w)
}

// Exec runs argv in the sandbox and returns how it ended. A missing program exits 127 and
// one that cannot be executed 126, as in a shell, saying why on stderr.
func (sb *Sandbox) Exec(ctx context.Context, argv []string, opts *ExecOptions) (ExecResult, error) {
	if opts == nil {
		opts = &ExecOptions{}
	}
	req := wire.ExecBody{Argv: argv, Env: opts.Env, Cwd: opts.Cwd, TimeoutMs: opts.Timeout.Milliseconds()}
	var out, errb bytes.Buffer
	var st wire.ExitStatus
	var err error
	if opts.Stdin != nil {
		st, err = sb.c.ExecStream(ctx, sb.ID, req, opts.Stdin, tee(&out, opts.Stdout), tee(&errb, opts.Stderr))
	} else {
		st, err = sb.c.Exec(ctx, sb.ID, req, tee(&out, opts.Stdout), tee(&errb, opts.Stderr))
	}
	if err != nil {
		return ExecResult{}, err
	}
	return ExecResult{ExitCode: st.Code, Signal: st.Signal, TimedOut: st.TimedOut, Stdout: out.Bytes(), Stderr: errb.Bytes()}, nil
}

// RunCode runs Python source in the sandbox's persistent interpreter: variables survive
// between calls and are carried into forks (with random generators reseeded in each copy).
// ctx bounds the call: when it ends the code is interrupted (KeyboardInterrupt), and an
// interpreter that does not stop within 2 s is killed, and the next call starts a fresh one
// (the variables are lost). A call whose interpreter died under it answers with
// CodeResult.Restarted. Output beyond 16 MiB is cut (CodeResult.OutputTruncated).
func (sb *Sandbox) RunCode(ctx context.Context, code string) (CodeResult, error) {
	var out, errb bytes.Buffer
	res, err := sb.c.RunCode(ctx, sb.ID, wire.CodeBody{Code: code}, &out, &errb)
	if err != nil {
		return CodeResult{}, err
	}
	return CodeResult{CodeResult: res, Stdout: out.String(), Stderr: errb.String()}, nil
}

// WriteFile writes data to the absolute path inside the sandbox with permission bits perm,
// creating parent directories. The file appears whole or not at all.
func (sb *Sandbox) WriteFile(ctx context.Context, path string, data []byte, perm fs.FileMode) error {
	return sb.c.PutFile(ctx, sb.ID, path, uint32(perm.Perm()), bytes.NewReader(data))
}

// ReadFile returns the content of the file at the absolute path inside the sandbox.
func (sb *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	var b bytes.Buffer
	err := sb.c.GetFile(ctx, sb.ID, path, &b)
	return b.Bytes(), err
}

// ListFiles lists the directory at the absolute path inside the sandbox: at most
// wire.MaxListEntries entries, the first in name order (Client.ListFiles also gives the
// directory's count).
func (sb *Sandbox) ListFiles(ctx context.Context, path string) ([]FileInfo, error) {
	ls, err := sb.c.ListFiles(ctx, sb.ID, path)
	return ls.Entries, err
}

// Checkpoint saves an image of the running sandbox, which keeps running. tag may be empty; a
// tag can stand for the checkpoint's id in Fork, Rollback and RemoveCheckpoint (the newest
// checkpoint with that tag).
func (sb *Sandbox) Checkpoint(ctx context.Context, tag string) (Checkpoint, error) {
	return sb.c.Checkpoint(ctx, sb.ID, tag)
}

// ForkChild is one child of a fork: a running, resealed sandbox, or the error that made the
// daemon destroy it.
type ForkChild struct {
	Sandbox *Sandbox
	Err     error
}

// ForkResult is every child of a fork, in order, and the checkpoint they were restored from.
type ForkResult struct {
	Checkpoint Checkpoint
	Children   []ForkChild
}

// Running returns the children that run.
func (r ForkResult) Running() []*Sandbox {
	var out []*Sandbox
	for _, c := range r.Children {
		if c.Sandbox != nil {
			out = append(out, c.Sandbox)
		}
	}
	return out
}

// Fork makes n independent copies of the sandbox, restored in parallel from checkpoint from
// (an id or tag), or from a fresh checkpoint when from is empty. Each copy has its own id,
// name, generation, hostname and machine id. Partial success is not an error: check each
// child. The error is non-nil when the fork was refused (a bad n: IsBadRequest) or when every
// child failed (the result still lists why).
func (sb *Sandbox) Fork(ctx context.Context, n int, from string) (ForkResult, error) {
	ans, err := sb.c.Fork(ctx, sb.ID, n, from, nil)
	var ae *Error
	if err != nil && !errors.As(err, &ae) {
		return ForkResult{}, err
	}
	res := ForkResult{Checkpoint: ans.Checkpoint}
	for _, ch := range ans.Children {
		var fc ForkChild
		switch {
		case ch.Error != nil:
			fc.Err = &Error{Status: wire.StatusOf(ch.Error.Code), ErrorBody: *ch.Error}
		case ch.Sandbox != nil:
			fc.Sandbox = &Sandbox{Sandbox: *ch.Sandbox, c: sb.c}
		}
		res.Children = append(res.Children, fc)
	}
	return res, err
}

// Rollback replaces the sandbox's running copy with a restore of the checkpoint (an id or
// tag): anything written since is gone; the id and name stay; the generation is new. On error
// the sandbox runs on as it was. sb is updated in place.
func (sb *Sandbox) Rollback(ctx context.Context, checkpoint string) error {
	rec, err := sb.c.Rollback(ctx, sb.ID, checkpoint)
	if err != nil {
		return err
	}
	sb.Sandbox = rec
	return nil
}

// Pause checkpoints the sandbox and stops it (no CPU or memory held until Resume). sb is
// updated in place.
func (sb *Sandbox) Pause(ctx context.Context) error {
	rec, err := sb.c.Pause(ctx, sb.ID)
	if err == nil {
		sb.Sandbox = rec
	}
	return err
}

// Resume restores the paused sandbox, resealed (same id, new generation); timeout, when
// positive, replaces its timeout. sb is updated in place.
func (sb *Sandbox) Resume(ctx context.Context, timeout time.Duration) error {
	rec, err := sb.c.ResumeSandbox(ctx, sb.ID, timeout.Milliseconds())
	if err == nil {
		sb.Sandbox = rec
	}
	return err
}

// SetTimeout gives the sandbox a new timeout counted from now (0: none). sb is updated in place.
func (sb *Sandbox) SetTimeout(ctx context.Context, timeout time.Duration) error {
	rec, err := sb.c.SetTimeout(ctx, sb.ID, timeout.Milliseconds(), "")
	if err == nil {
		sb.Sandbox = rec
	}
	return err
}
