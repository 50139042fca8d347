package e2b

import (
	"context"
	"fmt"
	"io"
	"syscall"

	"github.com/zygo-run/zygo/internal/e2b/envd"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// EnvdSandboxes is the envd API's view of the sandbox Manager (envd.Sandboxes): the Manager's
// process table, filesystem and interpreter, with envd's types converted to and from
// internal/guest's, and each sandbox's envd access token (AccessToken under Key).
type EnvdSandboxes struct {
	M   *sandbox.Manager
	Key []byte // Config.AccessKey
}

var (
	_ envd.Sandboxes       = EnvdSandboxes{}
	_ envd.AccessTokens    = EnvdSandboxes{}
	_ envd.OwnedFilePutter = EnvdSandboxes{}
	_ envd.IDResolver      = EnvdSandboxes{}
)

// ResolveID is the id of the sandbox ref names (an id or a name).
func (a EnvdSandboxes) ResolveID(ctx context.Context, ref string) (string, error) {
	rec, err := a.M.Get(ctx, ref)
	return rec.ID, err
}

// CheckRunning answers nil for a Running sandbox; ErrNotFound for none (or one E2B would not
// show: dead, failed); ErrFailedPrecondition naming the state otherwise (paused).
func (a EnvdSandboxes) CheckRunning(ctx context.Context, id string) error {
	rec, err := a.M.Get(ctx, id)
	if err != nil {
		return err
	}
	switch {
	case rec.State == sandbox.Running:
		return nil
	case !visible(rec.State):
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return fmt.Errorf("sandbox %s is %s: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition)
}

// UserHome is the home of user ("" = root) in the sandbox's /etc/passwd; ErrInvalidArgument for
// an unknown user (the Manager's UserInfo).
func (a EnvdSandboxes) UserHome(ctx context.Context, id, user string) (string, error) {
	if user == "" {
		user = "root"
	}
	u, err := a.M.UserInfo(ctx, id, user)
	return u.Home, err
}

// EnvdAccessToken is the sandbox's envd access token, once it is known to exist.
func (a EnvdSandboxes) EnvdAccessToken(ctx context.Context, id string) (string, error) {
	rec, err := a.M.Get(ctx, id)
	if err != nil {
		return "", err
	}
	return AccessToken(a.Key, rec), nil
}

// relay converts a channel of guest events into envd's and closes it when in closes. When ctx
// ends while a send waits (the reader left), it drains in, which the Manager closes when ctx
// ends, so no goroutine is left behind.
func relay[In, Out any](ctx context.Context, in <-chan In, conv func(In) Out) <-chan Out {
	out := make(chan Out)
	go func() {
		defer close(out)
		for ev := range in {
			select {
			case out <- conv(ev):
			case <-ctx.Done():
				for range in { //nolint:revive // draining: the Manager closes in once ctx has ended
				}
				return
			}
		}
	}()
	return out
}

func processEvent(ev guest.ProcessEvent) envd.ProcessEvent {
	return envd.ProcessEvent{Kind: ev.Kind, PID: ev.PID, Data: ev.Data, ExitCode: ev.ExitCode, Signal: ev.Signal, Error: ev.Error}
}

func processConfig(c envd.ProcessConfig) guest.ProcessConfig {
	return guest.ProcessConfig{Cmd: c.Cmd, Args: c.Args, Env: c.Env, Cwd: c.Cwd, User: c.User, Tag: c.Tag, Stdin: c.Stdin}
}

func selector(s envd.ProcessSelector) guest.ProcessSelector {
	return guest.ProcessSelector{PID: s.PID, Tag: s.Tag}
}

func entry(e guest.EntryInfo) envd.EntryInfo {
	return envd.EntryInfo{Name: e.Name, Path: e.Path, Type: e.Type, Size: e.Size, Mode: e.Mode, Owner: e.Owner,
		Group: e.Group, ModTime: e.ModTime, SymlinkTarget: e.SymlinkTarget}
}

func (a EnvdSandboxes) StartProcess(ctx context.Context, id string, cfg envd.ProcessConfig) (<-chan envd.ProcessEvent, error) {
	ch, err := a.M.StartProcess(ctx, id, processConfig(cfg))
	if err != nil {
		return nil, err
	}
	return relay(ctx, ch, processEvent), nil
}

func (a EnvdSandboxes) ConnectProcess(ctx context.Context, id string, sel envd.ProcessSelector) (<-chan envd.ProcessEvent, error) {
	ch, err := a.M.ConnectProcess(ctx, id, selector(sel))
	if err != nil {
		return nil, err
	}
	return relay(ctx, ch, processEvent), nil
}

func (a EnvdSandboxes) ListProcesses(ctx context.Context, id string) ([]envd.ProcessInfo, error) {
	ps, err := a.M.ListProcesses(ctx, id)
	out := make([]envd.ProcessInfo, 0, len(ps))
	for _, p := range ps {
		c := p.Config
		out = append(out, envd.ProcessInfo{PID: p.PID, Tag: p.Tag, Config: envd.ProcessConfig{Cmd: c.Cmd, Args: c.Args, Env: c.Env,
			Cwd: c.Cwd, User: c.User, Tag: c.Tag, Stdin: c.Stdin}})
	}
	return out, err
}

func (a EnvdSandboxes) SendInput(ctx context.Context, id string, sel envd.ProcessSelector, data []byte) error {
	return a.M.SendInput(ctx, id, selector(sel), data)
}

func (a EnvdSandboxes) CloseStdin(ctx context.Context, id string, sel envd.ProcessSelector) error {
	return a.M.CloseStdin(ctx, id, selector(sel))
}

func (a EnvdSandboxes) SignalProcess(ctx context.Context, id string, sel envd.ProcessSelector, sig syscall.Signal) error {
	return a.M.SignalProcess(ctx, id, selector(sel), sig)
}

func (a EnvdSandboxes) Stat(ctx context.Context, id, path string) (envd.EntryInfo, error) {
	e, err := a.M.Stat(ctx, id, path)
	return entry(e), err
}

func (a EnvdSandboxes) ListDir(ctx context.Context, id, path string, depth int) ([]envd.EntryInfo, error) {
	es, err := a.M.ListDir(ctx, id, path, depth)
	out := make([]envd.EntryInfo, 0, len(es))
	for _, e := range es {
		out = append(out, entry(e))
	}
	return out, err
}

func (a EnvdSandboxes) MakeDir(ctx context.Context, id, path, user string) (envd.EntryInfo, error) {
	e, err := a.M.MakeDir(ctx, id, path, user)
	return entry(e), err
}

func (a EnvdSandboxes) Move(ctx context.Context, id, src, dst string) (envd.EntryInfo, error) {
	e, err := a.M.Move(ctx, id, src, dst)
	return entry(e), err
}

func (a EnvdSandboxes) RemovePath(ctx context.Context, id, path string) error {
	return a.M.RemovePath(ctx, id, path)
}

func (a EnvdSandboxes) WatchDir(ctx context.Context, id, path string, recursive bool) (<-chan envd.FsEvent, error) {
	ch, err := a.M.WatchDir(ctx, id, path, recursive)
	if err != nil {
		return nil, err
	}
	return relay(ctx, ch, func(ev guest.FsEvent) envd.FsEvent { return envd.FsEvent{Name: ev.Name, Op: ev.Op} }), nil
}

func (a EnvdSandboxes) PutFile(ctx context.Context, id, path string, perm uint32, r io.Reader) error {
	return a.M.PutFile(ctx, id, path, perm, r)
}

// PutFileAs writes the file, and the parents it makes, owned by user (E2B's uploads belong to
// the user they name).
func (a EnvdSandboxes) PutFileAs(ctx context.Context, id, path string, perm uint32, user string, r io.Reader) error {
	return a.M.PutFileAs(ctx, id, path, perm, user, r)
}

// ReplaceFile renames the regular file src over dst in one step.
func (a EnvdSandboxes) ReplaceFile(ctx context.Context, id, src, dst string) error {
	return a.M.ReplaceFile(ctx, id, src, dst)
}

// GetFileAs reads the file with user's credentials (E2B reads files as its user).
func (a EnvdSandboxes) GetFileAs(ctx context.Context, id, path, user string, w io.Writer) error {
	return a.M.GetFileAs(ctx, id, path, user, w)
}

func (a EnvdSandboxes) GetFile(ctx context.Context, id, path string, w io.Writer) error {
	return a.M.GetFile(ctx, id, path, w)
}

func (a EnvdSandboxes) RunCode(ctx context.Context, id string, req guest.CodeRequest, stdout, stderr io.Writer) (guest.CodeResult, error) {
	return a.M.RunCode(ctx, id, req, stdout, stderr)
}
