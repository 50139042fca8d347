// Package kubetest gives a test a real Kubernetes API server: a kube-apiserver and an etcd,
// started by controller-runtime's envtest as two processes on loopback, with the test's CRDs
// installed, stopped when the test ends. The binaries are the ones scripts/kube-testenv.sh
// builds from the Go module proxy (`make kube-testenv`, which `make test` runs first); nothing
// is downloaded and no Docker or kind is involved. docs/kubernetes-testing.md has the recipe
// and what it costs.
//
// Walk-through: Start (or StartEnv) finds the binaries (AssetsDir), checks the CRD
// directories, starts etcd and then kube-apiserver on free loopback ports with fresh
// certificates, waits until the "default" namespace exists, installs every CRD found in the
// directories and waits until each is established, and registers a t.Cleanup that stops both
// processes and removes their data. Every API server is the test's own: tests in parallel
// each start their own.
//
// The processes' output goes to files in the test's temporary directory; a failed test gets
// the last lines of each in its log. The binaries die with the test binary (a parent-death
// signal set in tools/kube), so a killed test leaves no API server behind.
package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The timeouts envtest gets. Its defaults (20 s to start each process) are for an idle
// workstation; this project's CI is two cores shared by many test packages, where a
// kube-apiserver has been seen to need longer to answer its first health check.
const (
	startTimeout = 2 * time.Minute
	stopTimeout  = time.Minute
)

// Env is a running API server, reached as the admin user (group system:masters).
type Env struct {
	// Config reaches the API server (https on 127.0.0.1, a client certificate of the admin
	// user). Callers may copy and change it; the Env does not look at it again.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for Config, for a process that the test
	// starts (a controller, a kubectl-style client). It is in the test's temporary
	// directory, mode 0600, removed when the test ends.
	Kubeconfig string
	// AssetsDir is the directory of the kube-apiserver and etcd that run (AssetsDir()).
	AssetsDir string
}

// Start starts an API server for t with the CRDs of crdDirs installed, and returns its client
// configuration (admin user). It is StartEnv(t, crdDirs...).Config.
func Start(t testing.TB, crdDirs ...string) *rest.Config {
	t.Helper()
	return StartEnv(t, crdDirs...).Config
}

// StartEnv starts an API server for t, installs the CRDs of crdDirs and waits until they are
// established, and stops the server when t ends (t.Cleanup). Each of crdDirs is a directory
// (or a single file) of CRD manifests, YAML or JSON, several documents a file allowed;
// relative paths are from the test's working directory (its package directory).
//
// It fails t (t.Fatal) when the binaries are not built, saying which command builds them;
// when a CRD directory does not exist; when a CRD is refused or not established in time; and
// when the API server does not start within two minutes. It takes a few seconds on an idle
// machine (docs/kubernetes-testing.md has measurements).
func StartEnv(t testing.TB, crdDirs ...string) *Env {
	t.Helper()
	assets, err := AssetsDir()
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	for _, dir := range crdDirs {
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("kubetest: CRD directory: %v", err)
		}
	}

	logDir := t.TempDir() // before the cleanup below, so it is removed after the processes stop
	apiLog := createLog(t, filepath.Join(logDir, "kube-apiserver.log"))
	etcdLog := createLog(t, filepath.Join(logDir, "etcd.log"))
	env := &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{
				Path: filepath.Join(assets, "kube-apiserver"),
				Out:  apiLog,
				Err:  apiLog,
			},
			Etcd: &envtest.Etcd{
				Path: filepath.Join(assets, "etcd"),
				Out:  etcdLog,
				Err:  etcdLog,
			},
		},
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        crdDirs,
		ErrorIfCRDPathMissing:    len(crdDirs) > 0,
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  stopTimeout,
	}
	// Registered before Start: a Start that fails after a process is up (a CRD refused)
	// leaves it running, and Stop is safe on processes never started.
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("kubetest: stopping the API server: %v", err)
		}
		if t.Failed() {
			logTail(t, apiLog.Name())
			logTail(t, etcdLog.Name())
		}
	})

	begin := time.Now()
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("kubetest: starting kube-apiserver and etcd from %s: %v", assets, err)
	}
	t.Logf("kubetest: API server at %s, started in %v", cfg.Host, time.Since(begin).Round(time.Millisecond))

	kubeconfig := filepath.Join(logDir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatalf("kubetest: writing the kubeconfig: %v", err)
	}
	return &Env{Config: cfg, Kubeconfig: kubeconfig, AssetsDir: assets}
}

// AssetsDir returns the directory that holds the kube-apiserver and the etcd to run:
// $KUBEBUILDER_ASSETS when set (both files must be there), otherwise the build of
// scripts/kube-testenv.sh for tools/kube as it is now, found (never built) by running the
// script with --find from the repository that holds the working directory. The error says
// which command builds them (make kube-testenv) when they are missing.
func AssetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		for _, name := range []string{"kube-apiserver", "etcd"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				return "", fmt.Errorf("finding %s in KUBEBUILDER_ASSETS: %w (unset it to use the build of make kube-testenv)", name, err)
			}
		}
		return dir, nil
	}
	script, err := findScript()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script, "--find")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("finding the kube-apiserver and etcd build: %s", msg)
	}
	return strings.TrimSpace(stdout.String()), nil
}

// findScript returns the path of scripts/kube-testenv.sh in the nearest directory at or above
// the working directory that has it (go test runs a test in its package's directory).
func findScript() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding scripts/kube-testenv.sh: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		script := filepath.Join(dir, "scripts", "kube-testenv.sh")
		if _, err := os.Stat(script); err == nil {
			return script, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("finding scripts/kube-testenv.sh: %w", err)
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("finding scripts/kube-testenv.sh: not in %s or a directory above it: run the test from the zygo repository, or set KUBEBUILDER_ASSETS to a directory with kube-apiserver and etcd", wd)
		}
	}
}

// createLog creates path for a process's output and closes it when t ends.
func createLog(t testing.TB, path string) *os.File {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("kubetest: creating %s: %v", path, err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// logTailLines is how much of a process's output a failed test shows.
const logTailLines = 40

// logTail logs the last lines of the file at path, to show why an API server misbehaved.
func logTail(t testing.TB, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Logf("kubetest: reading %s: %v", path, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	t.Logf("kubetest: last lines of %s:\n%s", filepath.Base(path), strings.Join(lines, "\n"))
}
