package sandbox

import (
	"context"
	"errors"
	"io"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
)

// The process table and filesystem operations of a sandbox (docs/sandboxes.md, "Processes and
// filesystem operations"): what E2B's envd offers, done by the guest agent.
//
// A stream (StartProcess, ConnectProcess, WatchDir) is admitted like any call on the sandbox,
// but holds the sandbox only until the guest has accepted it: a connected background process
// must not keep a checkpoint, fork or rollback waiting. What follows runs in one goroutine
// per stream, under a ctx that ends with the caller's ctx or when the sandbox goes (rm, its
// engine's death, the Manager's Close). Everything it reads from the guest is bounded
// (guest.Client: lines of at most 1 MiB, answers of at most 64 MiB, at most
// guest.MaxOpenStreams streams per sandbox), and it sends to the caller's channel only while
// its ctx lives, so a guest cannot hold a daemon goroutine beyond the caller's ctx, and a
// caller that stops reading holds only its own stream (and, through the channel's flow
// control, slows that process's output down in the guest; see guest/process.go).
//
// A checkpoint cuts the channel to the guest, and with it the guest's side of every stream.
// The Manager re-attaches the streams of the same engine instance by itself once the agent
// is back (a process by its pid, a watch anew); output the process wrote, and changes made,
// between the cut and the re-attach are lost: the agent keeps no output for a stream that
// is gone. A process that ended meanwhile still gets its end (the agent remembers ended
// processes for a minute). A rollback (or anything else that replaces the engine instance)
// ends its streams (the channel closes without an end event) and the caller connects again
// to the processes of the restored copy. A fork child has the parent's processes, pids and tags; nothing is
// connected to them until a caller connects to the child.

// Bounds of the process calls.
const (
	// MaxTagBytes is the longest process tag.
	MaxTagBytes = 256
	// reattachMin and reattachMax bound the wait before a stream re-attaches after the
	// channel to the guest broke; it doubles for each re-attach of a stream that lived less
	// than reattachReset.
	reattachMin   = 50 * time.Millisecond
	reattachMax   = 2 * time.Second
	reattachReset = 10 * time.Second
)

// userRE is what a user name may look like (useradd's rule, and Samba's trailing $).
var userRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$`)

// validateUser checks a user name given in field: empty (root) or a name userRE accepts.
func validateUser(field, user string) error {
	if user != "" && !userRE.MatchString(user) {
		return invalid(field, "%s: want a user name of the sandbox's /etc/passwd (letters, digits, _ . -, at most 32)", short(user))
	}
	return nil
}

// ValidateProcessConfig checks a process to start: cmd, args, env (each key non-empty,
// without '=' or NUL), cwd, user and tag, with argv and env together at most MaxArgvEnvBytes.
func ValidateProcessConfig(cfg guest.ProcessConfig) error {
	if cfg.Cmd == "" {
		return invalid("cmd", "is empty: want the program to run (a path, or a name looked up in PATH)")
	}
	n, err := validateStrings("cmd", []string{cfg.Cmd})
	if err != nil {
		return err
	}
	a, err := validateStrings("args", cfg.Args)
	if err != nil {
		return err
	}
	if len(cfg.Env) > MaxArgs {
		return invalid("env", "has %d entries: at most %d", len(cfg.Env), MaxArgs)
	}
	keys := make([]string, 0, len(cfg.Env))
	for k := range cfg.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	e := 0
	for _, k := range keys {
		v := cfg.Env[k]
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00"):
			return invalid("env", "key %s: want a non-empty name without '=' or NUL", short(k))
		case strings.IndexByte(v, 0) >= 0:
			return invalid("env["+k+"]", "contains a NUL byte")
		case len(k)+len(v)+1 > MaxArgBytes:
			return invalid("env["+k+"]", "is %d bytes long: at most %d", len(k)+len(v)+1, MaxArgBytes)
		}
		e += len(k) + len(v) + 2
	}
	if n+a+e > MaxArgvEnvBytes {
		return invalid("args", "and env are %d bytes together: at most %d", n+a+e, MaxArgvEnvBytes)
	}
	if cfg.Cwd != "" {
		if strings.IndexByte(cfg.Cwd, 0) >= 0 || len(cfg.Cwd) > MaxPathBytes {
			return invalid("cwd", "%s: want a path of at most %d bytes without NUL", short(cfg.Cwd), MaxPathBytes)
		}
	}
	if err := validateUser("user", cfg.User); err != nil {
		return err
	}
	if cfg.Tag != "" {
		return validateProcessTag(cfg.Tag)
	}
	return nil
}

func validateProcessTag(tag string) error {
	if len(tag) > MaxTagBytes {
		return invalid("tag", "is %d bytes long: at most %d", len(tag), MaxTagBytes)
	}
	for _, r := range tag {
		if r < 0x20 || r == 0x7f {
			return invalid("tag", "%s contains a control character", short(tag))
		}
	}
	return nil
}

// ValidateSelector checks a process selector: exactly one of pid and tag.
func ValidateSelector(sel guest.ProcessSelector) error {
	if (sel.PID == 0) == (sel.Tag == "") {
		return invalid("selector", "want exactly one of pid and tag")
	}
	if sel.Tag != "" {
		return validateProcessTag(sel.Tag)
	}
	return nil
}

// StartProcess starts cfg in the sandbox's process table and streams its events: first
// ProcessStart with the pid, then its output (chunks of at most 32 KiB), then ProcessEnd,
// after which the channel is closed. Ending ctx only detaches: the process keeps running
// (E2B's background commands), and the channel is closed. The channel is also closed without
// an end when the sandbox goes (rm, death) or is rolled back. The caller must read the
// channel until it is closed, or end ctx. A checkpoint does not end it (see the package's
// "Processes" notes above). Errors: bad input wraps errdefs.ErrInvalidArgument naming the
// field (an unknown user too), a missing program or cwd errdefs.ErrNotFound, a tag in use
// errdefs.ErrExists, a program that cannot be executed errdefs.ErrPermissionDenied, too many
// open streams errdefs.ErrTooManyRequests; those of any call on a sandbox otherwise.
func (m *Manager) StartProcess(ctx context.Context, idOrName string, cfg guest.ProcessConfig) (<-chan guest.ProcessEvent, error) {
	if err := ValidateProcessConfig(cfg); err != nil {
		return nil, err
	}
	var in <-chan guest.ProcessEvent
	s, err := m.openStream(ctx, idOrName, func(ctx context.Context, g Guest) (err error) {
		in, err = g.StartProcess(ctx, cfg)
		return err
	})
	if err != nil {
		return nil, err
	}
	return m.relayProcess(s, in), nil
}

// ConnectProcess streams the events of the running process sel names as StartProcess does:
// ProcessStart with its pid, its output from now on, then ProcessEnd. An unknown pid or tag
// is an error wrapping errdefs.ErrNotFound.
func (m *Manager) ConnectProcess(ctx context.Context, idOrName string, sel guest.ProcessSelector) (<-chan guest.ProcessEvent, error) {
	if err := ValidateSelector(sel); err != nil {
		return nil, err
	}
	var in <-chan guest.ProcessEvent
	s, err := m.openStream(ctx, idOrName, func(ctx context.Context, g Guest) (err error) {
		in, err = g.ConnectProcess(ctx, sel)
		return err
	})
	if err != nil {
		return nil, err
	}
	return m.relayProcess(s, in), nil
}

// ListProcesses returns the running processes of the sandbox's process table, by pid.
func (m *Manager) ListProcesses(ctx context.Context, idOrName string) ([]guest.ProcessInfo, error) {
	var out []guest.ProcessInfo
	err := m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) (err error) {
		out, err = c.ListProcesses(ctx)
		return err
	})
	if out == nil && err == nil {
		out = []guest.ProcessInfo{}
	}
	return out, err
}

// SendInput writes data (at most guest.MaxInputBytes) to the stdin of the process sel names,
// waiting while its pipe is full until ctx ends. An unknown process wraps
// errdefs.ErrNotFound; one whose stdin is closed or was not kept open
// errdefs.ErrFailedPrecondition.
func (m *Manager) SendInput(ctx context.Context, idOrName string, sel guest.ProcessSelector, data []byte) error {
	if err := ValidateSelector(sel); err != nil {
		return err
	}
	if len(data) > guest.MaxInputBytes {
		return invalid("data", "is %d bytes: at most %d in one input", len(data), guest.MaxInputBytes)
	}
	return m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) error { return c.SendInput(ctx, sel, data) })
}

// CloseStdin closes the stdin of the process sel names; idempotent. An unknown process wraps
// errdefs.ErrNotFound.
func (m *Manager) CloseStdin(ctx context.Context, idOrName string, sel guest.ProcessSelector) error {
	if err := ValidateSelector(sel); err != nil {
		return err
	}
	return m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) error { return c.CloseStdin(ctx, sel) })
}

// SignalProcess sends sig (1 to 64) to the process sel names and to its process group (a
// shell's children too). An unknown process wraps errdefs.ErrNotFound.
func (m *Manager) SignalProcess(ctx context.Context, idOrName string, sel guest.ProcessSelector, sig syscall.Signal) error {
	if err := ValidateSelector(sel); err != nil {
		return err
	}
	if sig < 1 || sig > 64 {
		return invalid("signal", "%d: want a signal number from 1 to 64", int(sig))
	}
	return m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) error { return c.SignalProcess(ctx, sel, sig) })
}

// UserInfo returns the user name of the sandbox's /etc/passwd ("" is root): its uid, gid and
// home (what a relative path of that user is relative to). An unknown user wraps
// errdefs.ErrInvalidArgument.
func (m *Manager) UserInfo(ctx context.Context, idOrName, name string) (guest.UserInfo, error) {
	if err := validateUser("user", name); err != nil {
		return guest.UserInfo{}, err
	}
	var u guest.UserInfo
	err := m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) (err error) {
		u, err = c.UserInfo(ctx, name)
		return err
	})
	return u, err
}

// PutFileAs is PutFile done with the credentials of user of the sandbox's /etc/passwd ("" is
// root, as PutFile): the file and the parent directories it makes belong to the user, and
// what the user may not write wraps errdefs.ErrPermission. An unknown user wraps
// errdefs.ErrInvalidArgument.
func (m *Manager) PutFileAs(ctx context.Context, idOrName, path string, perm uint32, user string, r io.Reader) error {
	if err := ValidatePath("path", path); err != nil {
		return err
	}
	if perm > 0o7777 {
		return invalid("mode", "%o: want permission bits (at most 7777)", perm)
	}
	if err := validateUser("user", user); err != nil {
		return err
	}
	return m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) error { return c.PutFileAs(ctx, path, perm, user, r) })
}

// ReplaceFile renames the regular file src over dst inside the sandbox in one step (dst, if
// any, a regular file or a symlink, which is replaced, not followed).
func (m *Manager) ReplaceFile(ctx context.Context, idOrName, src, dst string) error {
	if err := ValidatePath("src", src); err != nil {
		return err
	}
	if err := ValidatePath("dst", dst); err != nil {
		return err
	}
	return m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) error { return c.ReplaceFile(ctx, src, dst) })
}

// GetFileAs is GetFile with the file opened with the credentials of user of the sandbox's
// /etc/passwd ("" is root, as GetFile): a file the user may not read wraps
// errdefs.ErrPermission, an unknown user errdefs.ErrInvalidArgument.
func (m *Manager) GetFileAs(ctx context.Context, idOrName, path, user string, w io.Writer) error {
	if err := ValidatePath("path", path); err != nil {
		return err
	}
	if err := validateUser("user", user); err != nil {
		return err
	}
	return m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) error { return c.GetFileAs(ctx, path, user, w) })
}

// stream is an admitted stream: its ctx (the caller's, ended too when the sandbox goes), the
// guest it reads from, and release, which the stream's goroutine calls at its end.
type stream struct {
	ctx     context.Context
	g       Guest
	release func()
}

// openStream admits a call on the sandbox, runs open under the stream's ctx, and lets the
// sandbox go (checkpoint, fork, rollback may proceed) once open has returned.
func (m *Manager) openStream(ctx context.Context, idOrName string, open func(context.Context, Guest) error) (*stream, error) {
	c, err := m.begin(ctx, idOrName, true, 0)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.e.ctx, func() { cancel(context.Cause(c.e.ctx)) })
	g := c.e.instance().Guest
	if err := c.end(open(sctx, g)); err != nil {
		stop()
		cancel(nil)
		return nil, err
	}
	return &stream{ctx: sctx, g: g, release: func() { stop(); cancel(nil) }}, nil
}

// maxReattachTries bounds the attempts of one re-attach that the guest's channel fails (the
// agent not back yet). A closed client (the instance replaced by a rollback, or destroyed)
// ends the stream at once.
const maxReattachTries = 5

// wait waits before a stream's next re-attach: backoff doubles unless the stream lived
// reattachReset. It returns false when s's ctx ended meanwhile.
func (s *stream) wait(backoff *time.Duration, lived time.Duration) bool {
	if lived >= reattachReset {
		*backoff = reattachMin
	}
	t := time.NewTimer(*backoff)
	defer t.Stop()
	*backoff = min(*backoff*2, reattachMax)
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// reopen re-opens a stream whose guest side broke, after a wait, trying again while the
// channel fails (errdefs.ErrUnavailable) up to maxReattachTries times. It returns the error
// that ended the tries (ctx's, or the guest's: a process that is gone, a closed client).
func reopen[T any](s *stream, backoff *time.Duration, lived time.Duration, open func() (<-chan T, error)) (<-chan T, error) {
	var err error
	for try := 0; try < maxReattachTries; try++ {
		if s.ctx.Err() != nil || !s.wait(backoff, lived) {
			return nil, context.Cause(s.ctx)
		}
		lived = 0
		var ch <-chan T
		if ch, err = open(); err == nil {
			return ch, nil
		}
		if !errdefs.IsUnavailable(err) || errors.Is(err, guest.ErrClientClosed) {
			return nil, err // the process is gone, or the instance (a rollback replaced it)
		}
	}
	return nil, err
}

// relayProcess forwards a process stream's events to the returned channel, re-attaching by
// pid when the channel to the guest broke (see the notes at the top of this file).
func (m *Manager) relayProcess(s *stream, in <-chan guest.ProcessEvent) <-chan guest.ProcessEvent {
	out := make(chan guest.ProcessEvent)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(out)
		defer s.release()
		var pid uint32
		backoff := reattachMin
		for {
			began := time.Now()
			for ev := range in {
				if ev.Kind == guest.ProcessStart {
					if pid != 0 {
						continue // a re-attach's: the caller has had the first
					}
					pid = ev.PID
				}
				select {
				case out <- ev:
				case <-s.ctx.Done():
					return
				}
				if ev.Kind == guest.ProcessEnd {
					return
				}
			}
			if pid == 0 {
				return
			}
			var err error
			in, err = reopen(s, &backoff, time.Since(began), func() (<-chan guest.ProcessEvent, error) {
				return s.g.ConnectProcess(s.ctx, guest.ProcessSelector{PID: pid})
			})
			if err != nil {
				m.log.Debug("re-attaching a process stream", "pid", pid, "err", err)
				return
			}
		}
	}()
	return out
}

// Stat describes the entry at the absolute path inside the sandbox (a symlink itself, not
// its target). A missing path wraps errdefs.ErrNotFound.
func (m *Manager) Stat(ctx context.Context, idOrName, path string) (guest.EntryInfo, error) {
	if err := ValidatePath("path", path); err != nil {
		return guest.EntryInfo{}, err
	}
	var e guest.EntryInfo
	err := m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) (err error) {
		e, err = c.Stat(ctx, path)
		return err
	})
	return e, err
}

// ListDir lists the directory at the absolute path, depth levels deep (1 to
// guest.MaxDirDepth; 1 is its own entries), without entering symlinks: each directory's
// entries in name order, a directory's entries right after it. More than guest.MaxDirEntries
// entries is an error wrapping errdefs.ErrTooLarge; a missing path errdefs.ErrNotFound; a
// file errdefs.ErrInvalidArgument.
func (m *Manager) ListDir(ctx context.Context, idOrName, path string, depth int) ([]guest.EntryInfo, error) {
	if err := ValidatePath("path", path); err != nil {
		return nil, err
	}
	if depth < 1 || depth > guest.MaxDirDepth {
		return nil, invalid("depth", "%d: want 1 to %d", depth, guest.MaxDirDepth)
	}
	var out []guest.EntryInfo
	err := m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) (err error) {
		out, err = c.ListDir(ctx, path, depth)
		return err
	})
	if out == nil && err == nil {
		out = []guest.EntryInfo{}
	}
	return out, err
}

// MakeDir makes the directory at the absolute path and its missing parents (mode 0755, the
// ones it makes owned by user when not "", else by root) and describes it. An existing path
// wraps errdefs.ErrExists; an unknown user errdefs.ErrInvalidArgument.
func (m *Manager) MakeDir(ctx context.Context, idOrName, path, user string) (guest.EntryInfo, error) {
	if err := ValidatePath("path", path); err != nil {
		return guest.EntryInfo{}, err
	}
	if err := validateUser("user", user); err != nil {
		return guest.EntryInfo{}, err
	}
	var e guest.EntryInfo
	err := m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) (err error) {
		e, err = c.MakeDir(ctx, path, user)
		return err
	})
	return e, err
}

// Move renames src to dst (absolute paths; dst's missing parents are made) and describes
// dst. A missing src wraps errdefs.ErrNotFound; an existing dst errdefs.ErrExists (a move
// never replaces); a dst inside src errdefs.ErrInvalidArgument.
func (m *Manager) Move(ctx context.Context, idOrName, src, dst string) (guest.EntryInfo, error) {
	if err := ValidatePath("src", src); err != nil {
		return guest.EntryInfo{}, err
	}
	if err := ValidatePath("dst", dst); err != nil {
		return guest.EntryInfo{}, err
	}
	var e guest.EntryInfo
	err := m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) (err error) {
		e, err = c.Move(ctx, src, dst)
		return err
	})
	return e, err
}

// RemovePath removes the absolute path and everything below it. A missing path wraps
// errdefs.ErrNotFound; "/" errdefs.ErrInvalidArgument.
func (m *Manager) RemovePath(ctx context.Context, idOrName, path string) error {
	if err := ValidatePath("path", path); err != nil {
		return err
	}
	return m.withGuest(ctx, idOrName, func(ctx context.Context, c Guest) error { return c.RemovePath(ctx, path) })
}

// WatchDir streams the changes under the directory at the absolute path (and below it with
// recursive), from when it returns until ctx ends or the sandbox goes; then the channel is
// closed. The caller must read it until then, or end ctx. Changes the guest's kernel queue
// cannot hold while the caller does not read, and those made while a checkpoint cut the
// channel, are lost. A missing path wraps errdefs.ErrNotFound, a file
// errdefs.ErrInvalidArgument, a recursive watch of more than guest.MaxWatchDirs
// directories errdefs.ErrTooLarge.
func (m *Manager) WatchDir(ctx context.Context, idOrName, path string, recursive bool) (<-chan guest.FsEvent, error) {
	if err := ValidatePath("path", path); err != nil {
		return nil, err
	}
	var in <-chan guest.FsEvent
	s, err := m.openStream(ctx, idOrName, func(ctx context.Context, g Guest) (err error) {
		in, err = g.WatchDir(ctx, path, recursive)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make(chan guest.FsEvent)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(out)
		defer s.release()
		backoff := reattachMin
		for {
			began := time.Now()
			for ev := range in {
				select {
				case out <- ev:
				case <-s.ctx.Done():
					return
				}
			}
			var err error
			in, err = reopen(s, &backoff, time.Since(began), func() (<-chan guest.FsEvent, error) {
				return s.g.WatchDir(s.ctx, path, recursive)
			})
			if err != nil {
				m.log.Debug("re-attaching a watch", "path", path, "err", err)
				return
			}
		}
	}()
	return out, nil
}
