// Package e2e drives the real zygo binary, real bubblewrap and real Python
// end to end: a daemon per test group on a temporary state dir, functions
// deployed through the CLI, invoked through the CLI and the HTTP API.
package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zygo-run/zygo/sdk/go/zygo"
	"github.com/zygo-run/zygo/test/e2eutil"
)

var zygoBin string

func TestMain(m *testing.M) {
	bin, cleanup, err := e2eutil.Build(true) // zygo-guest beside zygo: `zygo check sandboxes` needs it
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	zygoBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// requireTools fails the test (never skips) when a tool the e2e tests need
// is missing, saying how to install it.
func requireTools(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatal("bwrap not found: run `make deps` (apt-get install -y bubblewrap)")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import numpy").Run(); err != nil {
		t.Fatal("/usr/bin/python3 with numpy not found: run `make deps` (apt-get install -y python3-numpy)")
	}
}

// Daemon is a zygo serve process on its own state dir.
type Daemon struct {
	*e2eutil.Process
	t *testing.T
}

// startDaemon starts `zygo serve` on stateDir ("" for a new temp dir) and
// waits until it answers. It is stopped when the test ends.
func startDaemon(t *testing.T, stateDir string) *Daemon {
	t.Helper()
	return startDaemonWith(t, stateDir, nil)
}

// startDaemonWith is startDaemon with extra descriptors inherited by the
// daemon (fds 3, 4, ...), as a careless parent process would leave them.
func startDaemonWith(t *testing.T, stateDir string, extra []*os.File) *Daemon {
	t.Helper()
	requireTools(t)
	if stateDir == "" {
		var err error
		stateDir, err = os.MkdirTemp("", "zygo-e2e-state-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(stateDir) })
	}
	d := &Daemon{t: t, Process: &e2eutil.Process{T: t, Bin: zygoBin, StateDir: stateDir, Extra: extra}}
	d.Start(20 * time.Second)
	t.Cleanup(d.Stop)
	return d
}

// Stop sends SIGTERM and waits for a clean exit (idempotent).
func (d *Daemon) Stop() { d.Process.Stop(15 * time.Second) }

// CLI runs `zygo ARGS...` against this daemon and returns stdout, stderr
// and the exit code.
func (d *Daemon) CLI(args ...string) (stdout, stderr string, code int) {
	d.t.Helper()
	return d.Process.CLI("", 5*time.Minute, args...)
}

// Up deploys dir and fails the test on error.
func (d *Daemon) Up(dir string) {
	d.t.Helper()
	out, errOut, code := d.CLI("up", dir)
	if code != 0 {
		d.t.Fatalf("zygo up %s: exit %d\nstdout: %s\nstderr: %s\ndaemon log:\n%s", dir, code, out, errOut, d.Log)
	}
}

// fixture returns the path of testdata/NAME.
func fixture(name string) string {
	p, _ := filepath.Abs(filepath.Join("testdata", name))
	return p
}

// fixtureAs copies testdata/NAME into a temp dir as a function called as, with
// the [limits] table's lines for each key of limits replaced (or added), so one
// handler can be deployed twice with limits that cannot race each other: a
// case that shows one limit needs headroom on every other (the memory case
// burned 300 ms of CPU faulting in 64 MiB on a freshly booted VM, and its
// function's cpu_ms killed it first). Files are copied one level deep.
func fixtureAs(t *testing.T, name, as string, limits map[string]string) string {
	t.Helper()
	src, dst := fixture(name), t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "zygo.toml" {
			b = []byte(rewriteManifest(t, string(b), as, limits))
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// rewriteManifest renames the function in a fixture's zygo.toml and sets the
// given [limits] keys (the table must be last in the file, as in every fixture).
func rewriteManifest(t *testing.T, toml, as string, limits map[string]string) string {
	t.Helper()
	var out []string
	inLimits := false
	for _, line := range strings.Split(strings.TrimRight(toml, "\n"), "\n") {
		key, _, _ := strings.Cut(line, "=")
		key = strings.TrimSpace(key)
		switch {
		case strings.HasPrefix(line, "["):
			inLimits = strings.TrimSpace(line) == "[limits]"
		case !inLimits && key == "name":
			line = fmt.Sprintf("name = %q", as)
		case inLimits && limits[key] != "":
			continue // written below
		}
		out = append(out, line)
	}
	if !inLimits {
		t.Fatalf("fixture manifest has no trailing [limits] table:\n%s", toml)
	}
	keys := make([]string, 0, len(limits))
	for k := range limits {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+" = "+limits[k])
	}
	return strings.Join(out, "\n") + "\n"
}

// agentFixture returns the directory of one of the Python agent's own test fixtures
// (agents/python/tests/fixtures/NAME), for cases both suites run: the agent's tests drive it
// under a fake supervisor, these under the real daemon (its zygo.toml is only read here).
func agentFixture(name string) string {
	p, _ := filepath.Abs(filepath.Join("..", "..", "agents", "python", "tests", "fixtures", name))
	return p
}

// Invoke calls the function through the HTTP API and decodes the result
// into out (if not nil). It fails the test on an API error.
func (d *Daemon) Invoke(name string, event any, out any) *zygo.InvokeResult {
	d.t.Helper()
	res, err := d.TryInvoke(name, event)
	if err != nil {
		d.t.Fatalf("invoking %s: %v", name, err)
	}
	if out != nil {
		if err := json.Unmarshal(res.Value, out); err != nil {
			d.t.Fatalf("decoding result %s: %v", res.Value, err)
		}
	}
	return res
}

// TryInvoke calls the function and returns the API error, if any.
func (d *Daemon) TryInvoke(name string, event any) (*zygo.InvokeResult, error) {
	b, err := json.Marshal(event)
	if err != nil {
		d.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return d.Client.Invoke(ctx, name, b)
}

// InvokeMany runs n invocations with conc in flight and returns their raw
// values in order; it fails the test if any fails.
func (d *Daemon) InvokeMany(name string, n, conc int, event func(i int) any) []json.RawMessage {
	d.t.Helper()
	out := make([]json.RawMessage, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				res, err := d.TryInvoke(name, event(i))
				if err != nil {
					errs[i] = err
					continue
				}
				out[i] = res.Value
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			d.t.Fatalf("request %d of %d failed: %v", i, n, err)
		}
	}
	return out
}

// Logs returns every log line of a function as "stream line" strings.
func (d *Daemon) Logs(name, requestID string) []string {
	d.t.Helper()
	var all []string
	var after int64
	for {
		body, err := d.Client.Logs(context.Background(), name, zygo.LogsQuery{RequestID: requestID, After: after})
		if err != nil {
			d.t.Fatalf("logs %s: %v", name, err)
		}
		for _, l := range body.Lines {
			all = append(all, l.Stream+" "+l.Line)
		}
		if len(body.Lines) == 0 {
			return all
		}
		after = body.Next
	}
}

// apiError returns err as *zygo.Error or fails the test.
func apiError(t *testing.T, err error) *zygo.Error {
	t.Helper()
	var ae *zygo.Error
	if !errors.As(err, &ae) {
		t.Fatalf("want an API error, got %v", err)
	}
	return ae
}

// distinct counts distinct values.
func distinct[T comparable](vals []T) int {
	m := map[T]bool{}
	for _, v := range vals {
		m[v] = true
	}
	return len(m)
}

// writeFunction writes a function dir with the given files into a temp dir.
func writeFunction(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(strings.TrimLeft(body, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
