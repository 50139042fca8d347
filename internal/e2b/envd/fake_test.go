package envd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
)

// fakeSandboxes is a Sandboxes of two running sandboxes (they share the state) with an in-memory filesystem
// and scripted processes (run directly, or as the SDK's `/bin/bash -l -c "..."`):
//
//	echo ARGS...  prints ARGS on stdout and exits 0
//	fail          prints "boom" on stderr and exits 3
//	cat           echoes its input on stdout until stdin closes (exit 0) or a signal
//	              (exit -1, killed)
type fakeSandboxes struct {
	mu       sync.Mutex
	files    map[string][]byte       // guarded by mu; path -> content
	dirs     map[string]bool         // guarded by mu
	procs    map[uint32]*fakeProc    // guarded by mu
	nextPID  uint32                  // guarded by mu
	started  []ProcessConfig         // guarded by mu
	watches  map[string]chan FsEvent // guarded by mu; watched dir -> its events
	code     []string                // guarded by mu; every RunCode's code
	token    string                  // the envd access token ("" none)
	owners   map[string]string       // guarded by mu; path -> owner of PutFileAs
	getFault error                   // GetFile fails with it after writing "partial"
	figures  string                  // the value of figuresCode: base64 PNGs joined by commas
	frozen   chan struct{}           // guarded by mu; when set, Stat waits for it, ignoring ctx (a frozen guest)
	names    map[string]string       // guarded by mu; sandbox name -> the id it names now
}

var (
	_ Sandboxes       = (*fakeSandboxes)(nil)
	_ OwnedFilePutter = (*fakeSandboxes)(nil)
	_ AccessTokens    = (*fakeSandboxes)(nil)
	_ IDResolver      = (*fakeSandboxes)(nil)
)

// ResolveID knows the ids and the names of f.names.
func (f *fakeSandboxes) ResolveID(_ context.Context, ref string) (string, error) {
	f.mu.Lock()
	id, ok := f.names[ref]
	f.mu.Unlock()
	if ok {
		return id, nil
	}
	return ref, f.check(ref)
}

// fakeID is the sandbox the tests use; otherID runs too, to check that one sandbox cannot
// reach another's state.
const (
	fakeID  = "sb1"
	otherID = "sb2"
)

func newFake() *fakeSandboxes {
	return &fakeSandboxes{
		files:   map[string][]byte{},
		dirs:    map[string]bool{"/": true, "/home": true, "/home/user": true, "/root": true},
		procs:   map[uint32]*fakeProc{},
		nextPID: 100,
		watches: map[string]chan FsEvent{},
		owners:  map[string]string{},
	}
}

type fakeProc struct {
	pid  uint32
	cfg  ProcessConfig
	mu   sync.Mutex
	subs []*fakeSub // guarded by mu
	in   []byte     // guarded by mu; input received
}

// fakeSub is one reader of a process's events: a buffer (never full in these tests) closed
// at the process's end or when the reader's ctx ends.
type fakeSub struct {
	mu     sync.Mutex
	closed bool // guarded by mu
	ch     chan ProcessEvent
}

func (s *fakeSub) send(ev ProcessEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.ch <- ev
	}
}

func (s *fakeSub) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
}

func (f *fakeSandboxes) check(id string) error {
	if id != fakeID && id != otherID {
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return nil
}

func (f *fakeSandboxes) CheckRunning(_ context.Context, id string) error { return f.check(id) }

// UserHome knows root, user and alice.
func (f *fakeSandboxes) UserHome(_ context.Context, id, user string) (string, error) {
	if err := f.check(id); err != nil {
		return "", err
	}
	switch user {
	case "", "root":
		return "/root", nil
	case "user", "alice":
		return "/home/" + user, nil
	}
	return "", fmt.Errorf("user %q: no such user in /etc/passwd: %w", user, errdefs.ErrInvalidArgument)
}

func (f *fakeSandboxes) EnvdAccessToken(_ context.Context, id string) (string, error) {
	if err := f.check(id); err != nil {
		return "", err
	}
	return f.token, nil
}

// subscribe adds a subscriber to p, closed when ctx ends or p ends.
func (p *fakeProc) subscribe(ctx context.Context) *fakeSub {
	s := &fakeSub{ch: make(chan ProcessEvent, 256)}
	p.mu.Lock()
	p.subs = append(p.subs, s)
	p.mu.Unlock()
	context.AfterFunc(ctx, s.close)
	return s
}

func (p *fakeProc) emit(ev ProcessEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.subs {
		s.send(ev)
		if ev.Kind == EventEnd {
			s.close()
		}
	}
}

func (f *fakeSandboxes) end(p *fakeProc, ev ProcessEvent) {
	f.mu.Lock()
	delete(f.procs, p.pid)
	f.mu.Unlock()
	ev.Kind = EventEnd
	p.emit(ev)
}

func (f *fakeSandboxes) StartProcess(ctx context.Context, id string, cfg ProcessConfig) (<-chan ProcessEvent, error) {
	if err := f.check(id); err != nil {
		return nil, err
	}
	name, args := cfg.Cmd, cfg.Args
	if name == "/bin/bash" && len(args) == 3 && args[1] == "-c" { // the SDK's commands.run
		words := strings.Fields(args[2])
		name, args = words[0], words[1:]
	}
	switch name {
	case "busy": // the guest's stream budget spent, as guest.Client says it
		return nil, fmt.Errorf("the sandbox has 64 process and watch streams open, the most at once: close some: %w", errdefs.ErrTooManyRequests)
	case "echo", "fail", "cat":
	default:
		return nil, fmt.Errorf("command %q: %w", name, errdefs.ErrNotFound)
	}
	f.mu.Lock()
	f.nextPID++
	p := &fakeProc{pid: f.nextPID, cfg: cfg}
	f.procs[p.pid] = p
	f.started = append(f.started, cfg)
	f.mu.Unlock()
	sub := p.subscribe(ctx)
	p.emit(ProcessEvent{Kind: EventStart, PID: p.pid})
	switch name {
	case "echo":
		p.emit(ProcessEvent{Kind: EventStdout, Data: []byte(strings.Join(args, " ") + "\n")})
		f.end(p, ProcessEvent{})
	case "fail":
		p.emit(ProcessEvent{Kind: EventStderr, Data: []byte("boom\n")})
		f.end(p, ProcessEvent{ExitCode: 3})
	}
	return sub.ch, nil
}

func (f *fakeSandboxes) proc(id string, sel ProcessSelector) (*fakeProc, error) {
	if err := f.check(id); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.procs {
		if sel.PID != 0 && p.pid == sel.PID || sel.Tag != "" && p.cfg.Tag == sel.Tag {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%s: %w", sel, errdefs.ErrNotFound)
}

func (f *fakeSandboxes) ConnectProcess(ctx context.Context, id string, sel ProcessSelector) (<-chan ProcessEvent, error) {
	p, err := f.proc(id, sel)
	if err != nil {
		return nil, err
	}
	sub := p.subscribe(ctx)
	sub.send(ProcessEvent{Kind: EventStart, PID: p.pid})
	return sub.ch, nil
}

func (f *fakeSandboxes) ListProcesses(_ context.Context, id string) ([]ProcessInfo, error) {
	if err := f.check(id); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []ProcessInfo
	for _, p := range f.procs {
		out = append(out, ProcessInfo{PID: p.pid, Tag: p.cfg.Tag, Config: p.cfg})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

func (f *fakeSandboxes) SendInput(_ context.Context, id string, sel ProcessSelector, data []byte) error {
	p, err := f.proc(id, sel)
	if err != nil {
		return err
	}
	if !p.cfg.Stdin {
		return fmt.Errorf("%s has no stdin: %w", sel, errdefs.ErrFailedPrecondition)
	}
	p.mu.Lock()
	p.in = append(p.in, data...)
	p.mu.Unlock()
	p.emit(ProcessEvent{Kind: EventStdout, Data: data})
	return nil
}

func (f *fakeSandboxes) CloseStdin(_ context.Context, id string, sel ProcessSelector) error {
	p, err := f.proc(id, sel)
	if err != nil {
		return err
	}
	go f.end(p, ProcessEvent{})
	return nil
}

func (f *fakeSandboxes) SignalProcess(_ context.Context, id string, sel ProcessSelector, sig syscall.Signal) error {
	p, err := f.proc(id, sel)
	if err != nil {
		return err
	}
	name := map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM"}[sig]
	go f.end(p, ProcessEvent{ExitCode: -1, Signal: name})
	return nil
}

var fakeTime = time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)

func (f *fakeSandboxes) statLocked(p string) (EntryInfo, error) {
	if f.dirs[p] {
		return EntryInfo{Name: path.Base(p), Path: p, Type: TypeDir, Size: 4096, Mode: 0o755, Owner: "user", Group: "user", ModTime: fakeTime}, nil
	}
	if b, ok := f.files[p]; ok {
		return EntryInfo{Name: path.Base(p), Path: p, Type: TypeFile, Size: int64(len(b)), Mode: 0o644, Owner: "user", Group: "user", ModTime: fakeTime}, nil
	}
	return EntryInfo{}, fmt.Errorf("%s: %w", p, errdefs.ErrNotFound)
}

func (f *fakeSandboxes) Stat(_ context.Context, id, p string) (EntryInfo, error) {
	if err := f.check(id); err != nil {
		return EntryInfo{}, err
	}
	f.mu.Lock()
	frozen := f.frozen
	f.mu.Unlock()
	if frozen != nil {
		<-frozen
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statLocked(p)
}

func (f *fakeSandboxes) ListDir(_ context.Context, id, dir string, depth int) ([]EntryInfo, error) {
	if err := f.check(id); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.dirs[dir] {
		return nil, fmt.Errorf("directory %s: %w", dir, errdefs.ErrNotFound)
	}
	var out []EntryInfo
	add := func(p string) {
		rel := strings.TrimPrefix(p, strings.TrimSuffix(dir, "/")+"/")
		if p != dir && strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/") && strings.Count(rel, "/") < depth {
			e, _ := f.statLocked(p)
			out = append(out, e)
		}
	}
	for p := range f.dirs {
		add(p)
	}
	for p := range f.files {
		add(p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func (f *fakeSandboxes) MakeDir(_ context.Context, id, p, user string) (EntryInfo, error) {
	if err := f.check(id); err != nil {
		return EntryInfo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.statLocked(p); err == nil {
		return EntryInfo{}, fmt.Errorf("%s: %w", p, errdefs.ErrExists)
	}
	for q := p; q != "/"; q = path.Dir(q) {
		f.dirs[q] = true
	}
	f.owners[p] = user
	return f.statLocked(p)
}

func (f *fakeSandboxes) Move(_ context.Context, id, src, dst string) (EntryInfo, error) {
	if err := f.check(id); err != nil {
		return EntryInfo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.files[src]
	if !ok {
		return EntryInfo{}, fmt.Errorf("%s: %w", src, errdefs.ErrNotFound)
	}
	delete(f.files, src)
	f.files[dst] = b
	return f.statLocked(dst)
}

func (f *fakeSandboxes) ReplaceFile(_ context.Context, id, src, dst string) error {
	if err := f.check(id); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.files[src]
	if !ok {
		return fmt.Errorf("%s: %w", src, errdefs.ErrNotFound)
	}
	delete(f.files, src)
	f.files[dst] = b
	f.owners[dst] = f.owners[src]
	delete(f.owners, src)
	return nil
}

func (f *fakeSandboxes) RemovePath(_ context.Context, id, p string) error {
	if err := f.check(id); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.statLocked(p); err != nil {
		return err
	}
	delete(f.files, p)
	delete(f.dirs, p)
	return nil
}

func (f *fakeSandboxes) WatchDir(ctx context.Context, id, dir string, _ bool) (<-chan FsEvent, error) {
	if err := f.check(id); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.dirs[dir] {
		return nil, fmt.Errorf("directory %s: %w", dir, errdefs.ErrNotFound)
	}
	ch := make(chan FsEvent, 64)
	f.watches[dir] = ch
	context.AfterFunc(ctx, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.watches[dir] == ch {
			delete(f.watches, dir)
		}
		close(ch)
	})
	return ch, nil
}

// touch writes a file under a watched dir and reports it to the watch.
func (f *fakeSandboxes) touch(dir, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[path.Join(dir, name)] = []byte("x")
	if ch, ok := f.watches[dir]; ok {
		ch <- FsEvent{Name: name, Op: "create"}
	}
}

// watching reports whether a watch of dir is open.
func (f *fakeSandboxes) watching(dir string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.watches[dir]
	return ok
}

func (f *fakeSandboxes) PutFile(ctx context.Context, id, p string, perm uint32, r io.Reader) error {
	return f.PutFileAs(ctx, id, p, perm, "", r)
}

func (f *fakeSandboxes) PutFileAs(_ context.Context, id, p string, _ uint32, user string, r io.Reader) error {
	if err := f.check(id); err != nil {
		return err
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[p] = b
	f.owners[p] = user
	return nil
}

func (f *fakeSandboxes) GetFile(_ context.Context, id, p string, w io.Writer) error {
	if err := f.check(id); err != nil {
		return err
	}
	f.mu.Lock()
	b, ok := f.files[p]
	fault := f.getFault
	f.mu.Unlock()
	if !ok {
		return fmt.Errorf("%s: %w", p, errdefs.ErrNotFound)
	}
	if fault != nil {
		_, _ = w.Write([]byte("partial"))
		return fault
	}
	_, err := io.Copy(w, bytes.NewReader(b))
	return err
}

// RunCode understands: "print(X)" (X on stdout), "raise" (a NameError), "1+1" (its value),
// figuresCode (f.figures); anything else runs without a value. Every code is recorded.
func (f *fakeSandboxes) RunCode(_ context.Context, id string, req guest.CodeRequest, stdout, _ io.Writer) (guest.CodeResult, error) {
	if err := f.check(id); err != nil {
		return guest.CodeResult{}, err
	}
	f.mu.Lock()
	f.code = append(f.code, req.Code)
	f.mu.Unlock()
	switch c := req.Code; {
	case strings.HasPrefix(c, "print(") && strings.HasSuffix(c, ")"):
		_, _ = io.WriteString(stdout, strings.TrimSuffix(strings.TrimPrefix(c, "print("), ")")+"\n")
		return guest.CodeResult{OK: true}, nil
	case c == "raise":
		return guest.CodeResult{Error: "Traceback (most recent call last):\n  File \"<cell>\", line 1, in <module>\nNameError: name 'x' is not defined\n"}, nil
	case c == "1+1":
		return guest.CodeResult{OK: true, Value: "2"}, nil
	case c == figuresCode && f.figures != "":
		return guest.CodeResult{OK: true, Value: "'" + f.figures + "'"}, nil
	}
	return guest.CodeResult{OK: true}, nil
}
