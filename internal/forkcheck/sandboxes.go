package forkcheck

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// The sandbox mode (`zygo check sandboxes`) is seed 000 run against Zygo's gVisor sandboxes:
//
//  1. In a fresh sandbox, start a TCP listener and long-lived probes in Python, Node and Go
//     (the Go one is `zygo-guest probe`, package goprobe). Each draws once from every
//     generator; the Python one also arms a timer, leaves a line in a write buffer and opens a
//     connection to the listener. Two more probes run as declared services with on_fork =
//     restart, and the persistent code interpreter draws too.
//  2. Checkpoint, then make n copies of that one instant: forks of 3 (the last batch smaller)
//     until n-2, then 2 rollbacks of the source (see Shape).
//  3. In each copy write the trigger file; the long-lived probes draw again and report; new
//     Python, Node and Go processes and the interpreter draw too; the listener's connection,
//     the buffered line, the clocks and the timer are read back.
//  4. Evaluate every row against SandboxSpecs.

//go:embed sandboxprobes
var sandboxProbeFS embed.FS

// Paths and ports inside the check's sandboxes.
const (
	sbProbeDir = "/opt/zygo-check" // probe.py, probe.js
	sbWorkDir  = "/tmp/zygo-check" // ready files, the trigger, results, logs
	sbPort     = "7411"            // the listener, on 127.0.0.1
	sbExtPort  = "7412"            // the Python probe's port the host connects to (probe.py EXT_PORT)
	sbPython   = "/usr/bin/python3"
	sbNode     = "/usr/bin/node"
	sbGoProbe  = guest.BinaryPath // zygo-guest, with its hidden probe subcommand
)

// MaxSandboxCopies bounds -n: every copy is a whole gVisor sandbox.
const MaxSandboxCopies = 32

// forkBatch is how many children one fork call makes, as in the seed.
const forkBatch = 3

// SandboxOptions configures RunSandboxes. Zero fields take the defaults in brackets.
type SandboxOptions struct {
	N int // copies, 2..MaxSandboxCopies
	// Timer is how long the timer the Python probe arms before the checkpoint runs [10s]. It
	// must still be pending when the checkpoint is taken; the check fails otherwise.
	Timer time.Duration
	// Progress receives one line per step [none].
	Progress io.Writer
	// Specs are the expectations per probe [SandboxSpecs]. Tests add a control row.
	Specs map[string]map[string]Spec
}

// Shape returns how n copies are made: fork calls of forkBatch children (the last one
// smaller) for n-2 copies, then 2 rollbacks of the source. n = 11 is the seed's 3 forks of 3
// and 2 rollbacks; n = 5 is one fork of 3 and 2 rollbacks; n = 2 is the 2 rollbacks alone.
func Shape(n int) (forks []int, rollbacks int) {
	for left := n - 2; left > 0; left -= forkBatch {
		forks = append(forks, min(left, forkBatch))
	}
	return forks, 2
}

// ShapeString describes Shape(n) in words.
func ShapeString(n int) string {
	forks, rb := Shape(n)
	var parts []string
	for i := 0; i < len(forks); {
		j := i
		for j < len(forks) && forks[j] == forks[i] {
			j++
		}
		parts = append(parts, fmt.Sprintf("%d %s of %d", j-i, plural(j-i, "fork", "forks"), forks[i]))
		i = j
	}
	parts = append(parts, fmt.Sprintf("%d rollbacks of the source", rb))
	return strings.Join(parts, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// CopyInfo is one copy the check made.
type CopyInfo struct {
	Kind       string `json:"kind"`  // "fork" or "rollback"
	Batch      int    `json:"batch"` // which fork call, or which rollback (from 1)
	SandboxID  string `json:"sandbox_id"`
	Generation string `json:"generation"`
}

// Step is how long one step of the experiment took.
type Step struct {
	Name    string  `json:"step"`
	Seconds float64 `json:"seconds"`
}

// SandboxesReport is the outcome of the sandbox mode.
type SandboxesReport struct {
	Mode    string     `json:"mode"` // "sandboxes"
	N       int        `json:"n"`
	Shape   string     `json:"shape"`
	Series  []string   `json:"series"`
	Copies  []CopyInfo `json:"copies"`
	Timings []Step     `json:"timings"`
	Rows    []Row      `json:"rows"`
	// Values are every copy's value of every row (probe → row → one per copy, in Copies'
	// order; null where a copy did not report it).
	Values map[string]map[string][]json.RawMessage `json:"values"`
}

// sbRun is one run of the experiment.
type sbRun struct {
	m    *sandbox.Manager
	opts SandboxOptions
	rep  *SandboxesReport
	src  sandbox.SandboxRecord
	cp   sandbox.CheckpointRecord
	// armed is when the Python probe armed its timer (the guest's wall clock).
	armed time.Time
	// hostConn is the host's connection into the source, open across the checkpoint.
	hostConn net.Conn

	mu sync.Mutex // guards rep.Timings and got
	// got holds each copy's values (probe → row → value), by SandboxID.
	got map[string]map[string]map[string]json.RawMessage
}

// RunSandboxes runs the experiment on m and evaluates every row. It removes the sandboxes and
// the checkpoint it made, also on error. It returns an error only when the experiment could
// not run (a sandbox, a fork or a probe failed); row failures are in the report.
func RunSandboxes(ctx context.Context, m *sandbox.Manager, opts SandboxOptions) (*SandboxesReport, error) {
	if opts.N < 2 || opts.N > MaxSandboxCopies {
		return nil, fmt.Errorf("-n %d: must be 2..%d", opts.N, MaxSandboxCopies)
	}
	if opts.Timer <= 0 {
		opts.Timer = 10 * time.Second
	}
	if opts.Specs == nil {
		opts.Specs = SandboxSpecs
	}
	r := &sbRun{m: m, opts: opts, got: map[string]map[string]map[string]json.RawMessage{},
		rep: &SandboxesReport{Mode: "sandboxes", N: opts.N, Shape: ShapeString(opts.N), Series: []string{"result"}}}
	defer r.cleanup()
	t0 := time.Now()
	r.say("%d copies of one running sandbox: %s", opts.N, r.rep.Shape)
	if err := r.step("create the source sandbox", func() error { return r.createSource(ctx) }); err != nil {
		return nil, err
	}
	if err := r.step("start the probes", func() error { return r.startProbes(ctx) }); err != nil {
		return nil, err
	}
	if err := r.step("checkpoint", func() error { return r.checkpoint(ctx) }); err != nil {
		return nil, err
	}
	if err := r.copies(ctx); err != nil {
		return nil, err
	}
	total := seconds(time.Since(t0))
	r.rep.Timings = append(r.rep.Timings, Step{"total", total})
	r.say("%d copies collected in %.1f s", len(r.rep.Copies), total)
	r.evaluate()
	return r.rep, nil
}

// evaluate builds the rows, probe by probe, and the report's values in the copies' order.
func (r *sbRun) evaluate() {
	r.rep.Values = map[string]map[string][]json.RawMessage{}
	for _, probe := range SandboxProbeOrder {
		specs := r.opts.Specs[probe]
		if specs == nil {
			continue
		}
		var vals []map[string]json.RawMessage
		for _, c := range r.rep.Copies {
			vals = append(vals, r.got[c.SandboxID+"/"+c.Generation][probe])
		}
		r.rep.Rows = append(r.rep.Rows, Evaluate(probe, specs, []Series{{"result", vals}})...)
		r.rep.Values[probe] = map[string][]json.RawMessage{}
		for row := range specs {
			for _, v := range vals {
				r.rep.Values[probe][row] = append(r.rep.Values[probe][row], v[row])
			}
		}
	}
}

func (r *sbRun) say(format string, args ...any) {
	if r.opts.Progress != nil {
		fmt.Fprintf(r.opts.Progress, "zygo check sandboxes: "+format+"\n", args...)
	}
}

// step runs fn, records how long it took and says so.
func (r *sbRun) step(name string, fn func() error) error {
	t0 := time.Now()
	err := fn()
	d := seconds(time.Since(t0))
	if err != nil {
		r.say("%s: failed after %.1f s", name, d)
		return err
	}
	r.mu.Lock()
	r.rep.Timings = append(r.rep.Timings, Step{name, d})
	r.mu.Unlock()
	r.say("%s: %.2f s", name, d)
	return nil
}

func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }

// cleanup removes what the run made, with its own bounded context.
func (r *sbRun) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if r.hostConn != nil {
		r.hostConn.Close()
	}
	for _, c := range r.rep.Copies {
		if c.Kind == "fork" {
			_ = r.m.Remove(ctx, c.SandboxID) // collected copies are gone already
		}
	}
	if r.src.ID != "" {
		_ = r.m.Remove(ctx, r.src.ID)
	}
	if r.cp.ID != "" {
		_ = r.m.RemoveCheckpoint(ctx, r.cp.ID)
	}
}

// copies makes the copies, in Shape's order, and collects each: the forks (collected three at
// a time, then removed), then the rollbacks one by one (each replaces the last).
func (r *sbRun) copies(ctx context.Context) error {
	forks, rollbacks := Shape(r.opts.N)
	var kids []CopyInfo
	for i, n := range forks {
		name := fmt.Sprintf("fork %d (%d %s)", i+1, n, plural(n, "child", "children"))
		err := r.step(name, func() error {
			res, err := r.m.Fork(ctx, r.src.ID, sandbox.ForkOptions{N: n, From: r.cp.ID})
			for _, c := range res.Children {
				if c.Err != nil {
					return fmt.Errorf("fork %d: a child failed: %w", i+1, c.Err)
				}
				kid := CopyInfo{Kind: "fork", Batch: i + 1, SandboxID: c.Sandbox.ID, Generation: c.Sandbox.Generation}
				kids = append(kids, kid)
				r.rep.Copies = append(r.rep.Copies, kid)
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	if len(kids) > 0 {
		if err := r.step(fmt.Sprintf("collect %d forks", len(kids)), func() error { return r.collectAll(ctx, kids) }); err != nil {
			return err
		}
	}
	for i := 1; i <= rollbacks; i++ {
		var c CopyInfo
		err := r.step(fmt.Sprintf("rollback %d", i), func() error {
			rec, err := r.m.Rollback(ctx, r.src.ID, r.cp.ID)
			c = CopyInfo{Kind: "rollback", Batch: i, SandboxID: rec.ID, Generation: rec.Generation}
			return err
		})
		if err != nil {
			return err
		}
		r.rep.Copies = append(r.rep.Copies, c)
		if err := r.step(fmt.Sprintf("collect rollback %d", i), func() error { return r.collect(ctx, c) }); err != nil {
			return err
		}
	}
	return nil
}

// collectAll collects the fork children, forkBatch at a time, removing each once collected.
func (r *sbRun) collectAll(ctx context.Context, kids []CopyInfo) error {
	errs := make([]error, len(kids))
	sem := make(chan struct{}, forkBatch)
	var wg sync.WaitGroup
	for i, c := range kids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if errs[i] = r.collect(ctx, c); errs[i] == nil {
				errs[i] = r.m.Remove(ctx, c.SandboxID)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// exec runs argv in sandbox id and returns its stdout; a non-zero exit is an error carrying
// its stderr.
func (r *sbRun) exec(ctx context.Context, id string, argv ...string) ([]byte, error) {
	var out, errb bytes.Buffer
	st, err := r.m.Exec(ctx, id, guest.ExecRequest{Argv: argv, Timeout: 2 * time.Minute}, &out, &errb)
	if err != nil {
		return nil, fmt.Errorf("running %s in %s: %w", strings.Join(argv, " "), id, err)
	}
	if st.Code != 0 {
		return nil, fmt.Errorf("%s in %s exited with %d: %s", strings.Join(argv, " "), id, st.Code, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}
