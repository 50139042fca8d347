// Package e2eutil is what the end-to-end suites (test/e2e, test/e2e_sandbox) share: building
// the real binaries once per suite, and running `zygo serve` and the `zygo` CLI against it.
// Each suite keeps its own Daemon type around a Process for what only it needs.
package e2eutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/daemon"
	"github.com/zygo-run/zygo/internal/network/nettest"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// RepoRoot returns the repository's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Build builds bin/zygo (and, with guest, a static zygo-guest beside it, where the daemon
// looks for it first, as `make build` does) into a new temporary directory. It returns the
// zygo binary's path and a func that removes the directory, or the build's error with its
// output.
func Build(guest bool) (zygo string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "zygo-e2e-bin-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	bins := []struct{ out, pkg string }{{filepath.Join(dir, "zygo"), "./cmd/zygo"}}
	if guest {
		bins = append(bins, struct{ out, pkg string }{filepath.Join(dir, "zygo-guest"), "./cmd/zygo-guest"})
	}
	for _, b := range bins {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir = RepoRoot()
		cmd.Env = os.Environ()
		if strings.HasSuffix(b.pkg, "zygo-guest") {
			cmd.Env = append(cmd.Env, "CGO_ENABLED=0") // PID 1 of a sandbox must be static
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			cleanup()
			return "", nil, fmt.Errorf("building %s: %w\n%s", b.pkg, err, out)
		}
	}
	if err := BuildRandGuard(filepath.Join(dir, "zygo_rand.so")); err != nil {
		cleanup()
		return "", nil, err
	}
	return bins[0].out, cleanup, nil
}

// BuildRandGuard compiles the native-randomness guard (agents/native/zygo_rand.c, with the
// zygote's fork loop, zygo_fork.c) to out, as `make build` does next to bin/zygo. It fails
// saying how to install gcc when it is missing.
func BuildRandGuard(out string) error {
	native := filepath.Join(RepoRoot(), "agents", "native")
	return CompileShared(out, filepath.Join(native, "zygo_rand.c"), filepath.Join(native, "zygo_fork.c"), "-ldl")
}

// CompileShared compiles the C source src into the shared object out with gcc (-O2, as a
// library is usually built). It fails saying how to install gcc when it is missing.
func CompileShared(out, src string, libs ...string) error {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return fmt.Errorf("gcc not found: install it (apt-get install gcc, or make deps) to build %s", filepath.Base(src))
	}
	args := append([]string{"-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", out, src}, libs...)
	if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("compiling %s: %w\n%s", filepath.Base(src), err, b)
	}
	return nil
}

// LockedBuffer is a bytes.Buffer safe for a child process's writes and the test's reads.
type LockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Process is one `zygo serve` on a state dir, and the CLI pointed at it.
type Process struct {
	T        testing.TB
	Bin      string // the zygo binary
	StateDir string
	Args     []string   // extra serve flags
	Extra    []*os.File // descriptors the daemon inherits as fds 3, 4, ...
	Env      []string   // added to the test's own environment (KEY=VALUE)
	// Cmd is the running daemon (nil before Start); Log what it printed.
	Cmd    *exec.Cmd
	Log    *LockedBuffer
	Client *zygo.Client
	// NetTag and NetPool are the --network-tag and --network-pool every
	// Start passes (unless Args has --network-tag or --no-network): random
	// on the first Start and kept for restarts, so that daemons running at
	// once on one machine neither share addresses nor sweep each other's
	// veths, namespaces and nftables table.
	NetTag  string
	NetPool string
}

// Start starts the daemon and waits (at most ready) until it answers a status call; it fails
// the test with the daemon's log otherwise.
func (p *Process) Start(ready time.Duration) {
	p.T.Helper()
	p.Log = &LockedBuffer{}
	args := append([]string{"serve", "--state-dir", p.StateDir}, p.Args...)
	if !slices.Contains(p.Args, "--no-network") && !slices.Contains(p.Args, "--network-tag") {
		if p.NetTag == "" {
			p.NetTag, p.NetPool = nettest.Tag(), nettest.Pool().String()
		}
		args = append(args, "--network-tag", p.NetTag, "--network-pool", p.NetPool)
	}
	p.Cmd = exec.Command(p.Bin, args...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.Log, p.Log
	p.Cmd.ExtraFiles = p.Extra
	if len(p.Env) > 0 {
		p.Cmd.Env = append(os.Environ(), p.Env...)
	}
	if err := p.Cmd.Start(); err != nil {
		p.T.Fatal(err)
	}
	p.Client = zygo.NewClient(daemon.SocketPath(p.StateDir))
	deadline := time.Now().Add(ready)
	for {
		if _, err := p.Client.Status(context.Background()); err == nil {
			return
		}
		if time.Now().After(deadline) {
			p.Stop(5 * time.Second)
			p.T.Fatalf("daemon did not answer within %v; log:\n%s", ready, p.Log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Running reports whether the daemon was started and has not exited.
func (p *Process) Running() bool { return p.Cmd != nil && p.Cmd.ProcessState == nil }

// Stop sends SIGTERM and waits up to grace for a clean exit, then kills it; an unclean or
// late exit fails the test. It does nothing when the daemon is not running.
func (p *Process) Stop(grace time.Duration) {
	if !p.Running() {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.Cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			p.T.Errorf("daemon exited uncleanly: %v\n%s", err, p.Log)
		}
	case <-time.After(grace):
		_ = p.Cmd.Process.Kill()
		<-done
		p.T.Errorf("daemon did not stop within %v after SIGTERM", grace)
	}
}

// CLI runs `zygo --state-dir STATE ARGS...` with stdin and returns stdout, stderr and the exit
// code. A command still running after limit fails the test (a hang), as does one that cannot
// be run at all.
func (p *Process) CLI(stdin string, limit time.Duration, args ...string) (stdout, stderr string, code int) {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.Bin, append([]string{"--state-dir", p.StateDir}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &o, &e, strings.NewReader(stdin)
	err := cmd.Run()
	if ctx.Err() != nil {
		p.T.Fatalf("zygo %v did not finish within %v (a hang)", args, limit)
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		p.T.Fatalf("running zygo %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// MountsUnder returns the mount points at or below dir, from /proc/self/mountinfo (the mount
// point is its fifth field).
func MountsUnder(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}
