package sandboxtest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// FakeBackend is a sandbox.Backend and sandbox.Checkpointer for fast tests of the Manager and
// the API that need a guest to answer: each instance is a real guest agent (guest.Agent) in a
// process of its own, with its own root directory (so it never rewrites the host's /etc), on
// a real guest.Client over a unix socket. It is not a sandbox: a command it executes runs on
// the host, as the test's user. Each agent is a process of its own (fakeagent, built for each
// FakeBackend with the go tool), so that its reaper collects only its own children. An image
// is a directory holding one file; a restore starts a fresh agent holding the checkpoint's
// token.
type FakeBackend struct {
	name  string // Name's answer ["fake"]
	dir   string // instances' directories, removed at the test's end
	agent string // the fakeagent binary

	mu   sync.Mutex // guards inst and BeforeRestore
	inst map[string]*fakeInstance
	// BeforeRestore, when set, runs at the start of every Restore; its error fails it.
	BeforeRestore func(spec sandbox.Spec) error
}

type fakeInstance struct {
	client *guest.Client
	stop   context.CancelFunc
	done   chan struct{} // closed when the agent has stopped
}

var (
	_ sandbox.Backend      = (*FakeBackend)(nil)
	_ sandbox.Checkpointer = (*FakeBackend)(nil)
)

// NewFakeBackend returns a FakeBackend named "fake" whose instances are destroyed at the end
// of t.
func NewFakeBackend(t *testing.T) *FakeBackend {
	t.Helper()
	return NewNamedFakeBackend(t, "fake")
}

// NewNamedFakeBackend is NewFakeBackend for a backend called name: two of different names
// stand for two engines (gVisor and a VM) in tests of what the Manager does with each.
func NewNamedFakeBackend(t *testing.T, name string) *FakeBackend {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "zygo-fake-") // short: socket paths are at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	agent, err := buildAgent(dir)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	b := &FakeBackend{name: name, dir: dir, agent: agent, inst: map[string]*fakeInstance{}}
	t.Cleanup(func() {
		ids, _ := b.List(context.Background())
		for _, id := range ids {
			_ = b.Destroy(context.Background(), id)
		}
		_ = os.RemoveAll(dir)
	})
	return b
}

// Name implements sandbox.Backend.
func (b *FakeBackend) Name() string { return b.name }

// Create implements sandbox.Backend: it starts an agent booted with spec.Boot.
func (b *FakeBackend) Create(ctx context.Context, spec sandbox.Spec) (*sandbox.Instance, error) {
	return b.start(ctx, spec, spec.Boot)
}

func (b *FakeBackend) start(ctx context.Context, spec sandbox.Spec, boot guest.Boot) (*sandbox.Instance, error) {
	b.mu.Lock()
	if _, ok := b.inst[spec.ID]; ok {
		b.mu.Unlock()
		return nil, fmt.Errorf("instance %s: %w", spec.ID, errdefs.ErrExists)
	}
	b.inst[spec.ID] = nil // reserved
	b.mu.Unlock()
	in, err := b.startAgent(ctx, spec, boot)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		delete(b.inst, spec.ID)
		return nil, err
	}
	b.inst[spec.ID] = in
	return &sandbox.Instance{ID: spec.ID, Guest: in.client}, nil
}

func (b *FakeBackend) startAgent(ctx context.Context, spec sandbox.Spec, boot guest.Boot) (*fakeInstance, error) {
	dir := filepath.Join(b.dir, spec.ID)
	if err := os.MkdirAll(filepath.Join(dir, "root"), 0o700); err != nil {
		return nil, err
	}
	raw, _ := json.Marshal(boot)
	if err := os.WriteFile(filepath.Join(dir, "boot.json"), raw, 0o600); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	sctx, stop := context.WithCancel(context.Background())
	in := &fakeInstance{client: guest.NewClient(spec.Token, nil), stop: stop, done: make(chan struct{})}
	go func() { _ = in.client.Serve(sctx, ln) }()
	cmd := exec.Command(b.agent, sock, filepath.Join(dir, "boot.json"), filepath.Join(dir, "run"), filepath.Join(dir, "root"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the test
	if err := cmd.Start(); err != nil {
		stop()
		ln.Close()
		return nil, fmt.Errorf("starting the fake's agent: %w: %w", err, errdefs.ErrUnavailable)
	}
	go func() {
		defer close(in.done)
		_ = cmd.Wait()
	}()
	go func() {
		<-sctx.Done()
		_ = cmd.Process.Kill()
		ln.Close()
	}()
	if err := in.client.Wait(ctx); err != nil {
		stop()
		<-in.done
		in.client.Close()
		return nil, err
	}
	return in, nil
}

// buildAgent builds fakeagent into dir (a link of a few hundred ms with a warm build cache)
// and returns its path.
func buildAgent(dir string) (string, error) {
	p := filepath.Join(dir, "fakeagent")
	out, err := exec.Command("go", "build", "-o", p, "github.com/zygo-run/zygo/internal/sandbox/sandboxtest/fakeagent").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building fakeagent (needs the go tool on PATH): %w: %s", err, out)
	}
	return p, nil
}

// Attach implements sandbox.Backend: a running instance is handed out again.
func (b *FakeBackend) Attach(_ context.Context, spec sandbox.Spec) (*sandbox.Instance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	in := b.inst[spec.ID]
	if in == nil {
		return nil, fmt.Errorf("instance %s: %w", spec.ID, errdefs.ErrNotFound)
	}
	return &sandbox.Instance{ID: spec.ID, Guest: in.client}, nil
}

// Destroy implements sandbox.Backend.
func (b *FakeBackend) Destroy(_ context.Context, id string) error {
	b.mu.Lock()
	in := b.inst[id]
	delete(b.inst, id)
	b.mu.Unlock()
	if in == nil {
		return nil
	}
	in.stop()
	in.client.Close()
	<-in.done
	return os.RemoveAll(filepath.Join(b.dir, id))
}

// List implements sandbox.Backend.
func (b *FakeBackend) List(context.Context) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for id, in := range b.inst {
		if in != nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Checkpoint implements sandbox.Checkpointer: imageDir gets one file naming the instance.
func (b *FakeBackend) Checkpoint(_ context.Context, id, imageDir string) error {
	b.mu.Lock()
	in := b.inst[id]
	b.mu.Unlock()
	if in == nil {
		return fmt.Errorf("instance %s: %w", id, errdefs.ErrNotFound)
	}
	if _, err := os.Stat(imageDir); err == nil {
		return fmt.Errorf("image dir exists: %w", errdefs.ErrExists)
	}
	if err := os.MkdirAll(imageDir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(imageDir, "checkpoint.img"), []byte(id), 0o600)
}

// Restore implements sandbox.Checkpointer: after BeforeRestore, a fresh agent holding
// spec.Token.
func (b *FakeBackend) Restore(ctx context.Context, imageDir string, spec sandbox.Spec) (*sandbox.Instance, error) {
	b.mu.Lock()
	hook := b.BeforeRestore
	b.mu.Unlock()
	if hook != nil {
		if err := hook(spec); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(imageDir, "checkpoint.img")); err != nil {
		return nil, fmt.Errorf("image: %w", errdefs.ErrNotFound)
	}
	return b.start(ctx, spec, guest.Boot{Token: spec.Token, Identity: guest.Identity{Hostname: spec.Hostname}})
}

// SetBeforeRestore sets BeforeRestore.
func (b *FakeBackend) SetBeforeRestore(fn func(spec sandbox.Spec) error) {
	b.mu.Lock()
	b.BeforeRestore = fn
	b.mu.Unlock()
}

// FakeReseal is a sandbox.ResealFunc for FakeBackend: it acknowledges like a guest would,
// with a random entropy sample, without calling the guest.
func FakeReseal(_ context.Context, t sandbox.ResealTarget) (guest.ResealResult, error) {
	s := make([]byte, 32)
	_, _ = rand.Read(s)
	return guest.ResealResult{Generation: t.Sandbox.Generation, EntropySample: s}, nil
}
