package function_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/store"
)

// memRegistry is an in-memory function.Registry.
type memRegistry struct {
	mu       sync.Mutex
	versions map[string]store.Version // function -> active version
}

func (r *memRegistry) PutVersion(_ context.Context, v store.Version) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.versions[v.Function] = v
	return nil
}
func (r *memRegistry) SetActive(context.Context, string, string) error { return nil }
func (r *memRegistry) Function(_ context.Context, name string) (store.FunctionRecord, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.versions[name]
	if !ok {
		return store.FunctionRecord{}, errdefs.ErrNotFound
	}
	return store.FunctionRecord{Name: name, Active: v}, nil
}
func (r *memRegistry) Functions(context.Context) ([]store.FunctionRecord, error) { return nil, nil }
func (r *memRegistry) DeleteFunction(_ context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.versions, name)
	return nil
}
func (r *memRegistry) AppendLogs(context.Context, []store.LogLine) error { return nil }
func (r *memRegistry) Versions(_ context.Context, name string) ([]store.Version, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := r.versions[name]; ok {
		return []store.Version{v}, nil
	}
	return nil, nil
}
func (r *memRegistry) DeleteVersion(context.Context, string, string) error { return nil }

// hostileManager returns a Manager whose sandboxes are
// internal/agentproc/testdata/holdpipes-bwrap (ignores stop, leaves a process
// holding its output pipes), and a deploy function for it. Leftovers are
// killed when the test ends.
func hostileManager(t *testing.T) (*function.Manager, func(name string)) {
	t.Helper()
	fake, err := filepath.Abs("../agentproc/testdata/holdpipes-bwrap")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	m, err := function.NewManager(function.Config{StateDir: state, AgentDir: t.TempDir(), Bwrap: fake,
		ReadyTimeout: 20 * time.Second}, &memRegistry{versions: map[string]store.Version{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var pidFiles []string
	t.Cleanup(func() {
		m.Shutdown()
		for _, p := range pidFiles {
			b, _ := os.ReadFile(p)
			if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	deploy := func(name string) {
		t.Helper()
		dir := t.TempDir()
		pidFile := filepath.Join(state, name+".leftover")
		pidFiles = append(pidFiles, pidFile)
		manifest := fmt.Sprintf("name = %q\nruntime = \"python\"\nhandler = \"main:handler\"\n[env]\nHOLDPIPES_LEFTOVER = %q\n", name, pidFile)
		writeTree(t, dir, []treeFile{{"zygo.toml", 0o644, manifest}, {"main.py", 0o644, "def handler(e, c): return 1\n"}})
		if _, err := m.Deploy(context.Background(), bytes.NewReader(pack(t, dir))); err != nil {
			t.Fatalf("deploying %s: %v", name, err)
		}
	}
	return m, deploy
}

// TestStuckStopDoesNotBlockOtherFunctions (issue 12, point 1): while one
// function's sandbox is being stopped (held here until the test releases
// it, then stopped for real although it ignores the stop message and holds
// its output pipes), a Deploy and a Remove of other functions complete.
func TestStuckStopDoesNotBlockOtherFunctions(t *testing.T) {
	leaks := checkGoroutines(t)
	m, deploy := hostileManager(t)
	deploy("a")
	deploy("b")
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	function.SetStopRunner(m, func(rt function.Runner) {
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			<-release
		}
		rt.Stop()
	})
	removed := make(chan error, 1)
	go func() { removed <- m.Remove(context.Background(), "a") }()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("Remove of a never reached stopping its zygote")
	}
	others := make(chan error, 1)
	go func() {
		deploy("c")
		others <- m.Remove(context.Background(), "b")
	}()
	select {
	case err := <-others:
		if err != nil {
			t.Fatalf("removing b: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a Deploy and a Remove of other functions waited for a's zygote to stop")
	}
	close(release)
	select {
	case err := <-removed:
		if err != nil {
			t.Fatalf("removing a: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Remove hung on a sandbox that ignores stop and holds its output pipes")
	}
	if names := m.List(); len(names) != 1 || names[0].Name != "c" {
		t.Errorf("functions left: %+v", names)
	}
	m.Shutdown()
	leaks() // every goroutine of the Manager and of its sandboxes has ended
}
