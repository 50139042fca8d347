package forkcheck

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/zygo-run/zygo/sdk/go/zygo"
)

//go:embed probes
var probeFS embed.FS

// Probe is one function the functions mode deploys and invokes N times.
type Probe struct {
	Name  string          // the deployed function name
	Dir   string          // a function directory (zygo.toml + code)
	Specs map[string]Spec // row expectations
}

// secretHolder names the function that holds a secret while the probes run.
const (
	secretHolder = "zygo-check-secret-holder"
	secretName   = "ZYGO_CHECK_SECRET"
)

// BuiltinProbes extracts the embedded probes into dir and returns them with
// their expectations: Python and native always, Node when node is true. The
// native library both Python probes load (probes/native/token.c) is compiled
// here with gcc, on the machine that runs the check; without gcc it fails
// saying how to install it.
func BuiltinProbes(dir string, node bool) ([]Probe, error) {
	if err := fs.WalkDir(probeFS, "probes", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, p)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := probeFS.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	}); err != nil {
		return nil, fmt.Errorf("extracting probes: %w", err)
	}
	src := filepath.Join(dir, "probes", "native", "token.c")
	for _, probe := range []string{"python", "native"} {
		if err := compileShared(filepath.Join(dir, "probes", probe, "libtoken.so"), src); err != nil {
			return nil, err
		}
	}
	probes := []Probe{
		{Name: "zygo-check-python", Dir: filepath.Join(dir, "probes", "python"), Specs: PythonSpecs},
		{Name: "zygo-check-native", Dir: filepath.Join(dir, "probes", "native"), Specs: NativeSpecs},
	}
	if node {
		probes = append(probes, Probe{Name: "zygo-check-node", Dir: filepath.Join(dir, "probes", "node"), Specs: NodeSpecs})
	}
	return probes, nil
}

// compileShared builds the C source src into the shared object out with gcc
// -O2 (as libraries usually are: the probe's initialiser ends in a tail call).
func compileShared(out, src string) error {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return fmt.Errorf("building the native probe library: gcc not found: install it (apt-get install gcc)")
	}
	if b, err := exec.Command(gcc, "-shared", "-fPIC", "-O2", "-o", out, src).CombinedOutput(); err != nil {
		return fmt.Errorf("building the native probe library: %w\n%s", err, b)
	}
	return nil
}

// FunctionsReport is the outcome of the functions mode.
type FunctionsReport struct {
	Mode   string   `json:"mode"` // "functions"
	N      int      `json:"n"`
	Series []string `json:"series"`
	Rows   []Row    `json:"rows"`
}

// RunFunctions deploys the probes (and a function holding a secret) through
// client, invokes each probe n times sequentially and n times with n in
// flight, and evaluates every row. It returns an error only when the
// experiment could not run (deploy or invoke failed); row failures are in
// the report.
func RunFunctions(ctx context.Context, client *zygo.Client, probes []Probe, holderDir string, n int) (*FunctionsReport, error) {
	if n < 2 {
		return nil, fmt.Errorf("-n must be at least 2 to compare copies, got %d", n)
	}
	if holderDir != "" {
		stop, err := holdSecret(ctx, client, holderDir)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	rep := &FunctionsReport{Mode: "functions", N: n, Series: []string{"sequential", "concurrent"}}
	for _, p := range probes {
		if _, err := client.DeployDir(ctx, p.Dir); err != nil {
			return nil, fmt.Errorf("deploying probe %s: %w", p.Name, err)
		}
		seq, err := invokeN(ctx, client, p.Name, n, 1)
		if err != nil {
			return nil, err
		}
		con, err := invokeN(ctx, client, p.Name, n, n)
		if err != nil {
			return nil, err
		}
		rep.Rows = append(rep.Rows, Evaluate(p.Name, p.Specs, []Series{{"sequential", seq}, {"concurrent", con}})...)
	}
	return rep, nil
}

// holdSecret sets a random secret, deploys the function that holds it and
// keeps one of its requests in flight (so its secret file exists) until
// stop is called.
func holdSecret(ctx context.Context, client *zygo.Client, dir string) (stop func(), err error) {
	var v [16]byte
	_, _ = rand.Read(v[:])
	if err := client.SetSecret(ctx, secretName, []byte(hex.EncodeToString(v[:]))); err != nil {
		return nil, fmt.Errorf("setting the check's secret: %w", err)
	}
	if _, err := client.DeployDir(ctx, dir); err != nil {
		return nil, fmt.Errorf("deploying the secret holder: %w", err)
	}
	hctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for hctx.Err() == nil {
			_, _ = client.Invoke(hctx, secretHolder, []byte(`{"hold_s": 1}`))
		}
	}()
	return func() { cancel(); wg.Wait() }, nil
}

// invokeN runs n requests, conc at a time, and decodes each result as a
// row → value map.
func invokeN(ctx context.Context, client *zygo.Client, name string, n, conc int) ([]map[string]json.RawMessage, error) {
	out := make([]map[string]json.RawMessage, n)
	errs := make([]error, n)
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			res, err := client.Invoke(ctx, name, []byte(`{}`))
			if err != nil {
				errs[i] = fmt.Errorf("invoking probe %s (copy %d): %w", name, i+1, err)
				return
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(res.Value, &m); err != nil {
				errs[i] = fmt.Errorf("probe %s returned %s: %w", name, res.Value, err)
				return
			}
			out[i] = m
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
