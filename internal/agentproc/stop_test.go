package agentproc_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/nsbox"
)

// HoldPipesSpec returns the Spec of a zygote whose "bwrap" is
// testdata/holdpipes-bwrap: it ignores the stop message and SIGTERM and
// leaves a process in a session of its own holding its stdout and stderr.
// The leftover is killed when the test ends; its pid is returned.
func holdPipesSpec(t *testing.T) (agentproc.Spec, func() int) {
	t.Helper()
	fake, err := filepath.Abs("testdata/holdpipes-bwrap")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Fatal("/usr/bin/python3 not found: apt-get install -y python3")
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "leftover.pid")
	leftover := func() int {
		b, _ := os.ReadFile(pidFile)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return pid
	}
	t.Cleanup(func() {
		if pid := leftover(); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return agentproc.Spec{
		Box:     nsbox.Spec{Bwrap: fake, Interpreter: "/usr/bin/python3", CodeDir: dir, AgentDir: dir, EtcDir: filepath.Join(dir, "etc")},
		Runtime: "python", Handler: "main:handler", Mode: agentproc.ModeFork,
		Env:    []string{"HOLDPIPES_LEFTOVER=" + pidFile},
		RunDir: filepath.Join(dir, "run"), ReadyTimeout: 20 * time.Second,
	}, leftover
}

// TestStopIsBoundedWhenTheSandboxHoldsItsPipes (issue 12, point 1): a
// sandbox that ignores the stop message and leaves a process holding its
// stdout and stderr does not keep Stop (or Done) waiting, and no goroutine
// of the zygote is left behind.
func TestStopIsBoundedWhenTheSandboxHoldsItsPipes(t *testing.T) {
	spec, leftover := holdPipesSpec(t)
	before := runtime.NumGoroutine()
	z, err := agentproc.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	stopped := make(chan struct{})
	go func() { z.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop hung on a sandbox that holds its output pipes")
	}
	select {
	case <-z.Done():
	default:
		t.Error("Stop returned but Done is not closed")
	}
	if pid := leftover(); pid <= 0 || syscall.Kill(pid, 0) != nil {
		t.Fatalf("the leftover process (pid %d) is gone: the test did not hold the pipes", pid)
	}
	if _, err := os.Stat(spec.RunDir); !os.IsNotExist(err) {
		t.Errorf("run dir left behind: %v", err)
	}
	// Every goroutine of the zygote ends (a generous bound, not a timing test).
	for deadline := time.Now().Add(30 * time.Second); runtime.NumGoroutine() > before; {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before Start, %d after Stop:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(50 * time.Millisecond)
	}
}
