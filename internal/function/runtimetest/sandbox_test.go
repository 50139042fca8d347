package runtimetest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/zygo-run/zygo/agents"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/function/runtimetest"
	"github.com/zygo-run/zygo/internal/seccomp"
)

// sandboxTarget returns the Target of one kind of NewSandboxLauncher's
// runners, on real bwrap and interpreters.
func sandboxTarget(t *testing.T, rt function.Runtime, kind function.Kind, manifest string) runtimetest.Target {
	t.Helper()
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		t.Fatal("bwrap not found: apt-get install -y bubblewrap (scripts/deps.sh)")
	}
	interp := "/usr/bin/python3"
	if rt == function.RuntimeNode {
		interp = "/usr/bin/node"
	}
	if _, err := os.Stat(interp); err != nil {
		t.Fatalf("%s not found: run scripts/deps.sh", interp)
	}
	state := t.TempDir()
	if err := os.Chmod(state, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(state, "agents"), 0o755); err != nil {
		t.Fatal(err)
	}
	agentDir, err := agents.Extract(filepath.Join(state, "agents"))
	if err != nil {
		t.Fatal(err)
	}
	strict, err := seccomp.Strict()
	if err != nil {
		t.Fatal(err)
	}
	l := function.NewSandboxLauncher(function.SandboxConfig{StateDir: state, AgentDir: agentDir, Bwrap: bwrap,
		ReadyTimeout: 60 * time.Second, StrictFilter: strict})
	runDirs := filepath.Join(state, "run")
	if err := os.MkdirAll(runDirs, 0o711); err != nil {
		t.Fatal(err)
	}
	return runtimetest.Target{Runtime: rt, Manifest: manifest, RunDirs: runDirs,
		New: func(t *testing.T, codeDir string, man *function.Manifest) function.Runner {
			r, err := l.NewRunner(function.RunnerOptions{Kind: kind, Function: man.Name, Version: "v1", Manifest: man, CodeDir: codeDir})
			if err != nil {
				t.Fatal(err)
			}
			if got := function.KindOf(man); got != kind {
				t.Fatalf("the manifest chooses %q, the test runs %q", got, kind)
			}
			return r
		}}
}

func TestForkZygote(t *testing.T) {
	runtimetest.Run(t, sandboxTarget(t, function.RuntimePython, function.KindFork, ""))
}

func TestSpawn(t *testing.T) {
	runtimetest.Run(t, sandboxTarget(t, function.RuntimePython, function.KindSpawn, `mode = "spawn"`))
}

func TestNodeWorkerPool(t *testing.T) {
	runtimetest.Run(t, sandboxTarget(t, function.RuntimeNode, function.KindWorker, "pool_size = 1"))
}

// TestNodeWorkersWithoutPool: pool_size = 0 starts a worker per request.
func TestNodeWorkersWithoutPool(t *testing.T) {
	runtimetest.Run(t, sandboxTarget(t, function.RuntimeNode, function.KindWorker, "pool_size = 0"))
}
