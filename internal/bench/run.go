package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// Config says what to run.
type Config struct {
	Root   string // the repository root (examples/ lives there)
	Python string // interpreter for the fork floor, default /usr/bin/python3
	N      int    // requests per warm series (default 200)
	ColdN  int    // requests per cold series (default 20)
	Growth []int  // zygote ballast sizes, MiB (default 64, 256, 1024)
	// Scale is the numbers of functions deployed at once that the stats
	// function's warm p50 and daemon CPU are measured with (default 1,
	// 10, 50): the others are trivial fork-mode functions, idle.
	Scale []int
	// CPUN is the number of requests of the 8-client series over which CPU
	// per request is read from /proc/PID/stat (default 1000).
	CPUN int
	// Zygo is the zygo binary the daemon runs from (`zygo serve`, its own
	// process, so that its CPU is its own); default Root/bin/zygo.
	Zygo string
	// CPUProfile, if set, is where the daemon writes its Go CPU profile
	// (`zygo serve --cpuprofile`) over the whole run.
	CPUProfile string
	// Only, when not empty, names the steps to run after warm (which the
	// others read figures from, and always runs): ideal, cold, floor,
	// node, growth, scale, memory, pools (StepNames). Run fails on an
	// unknown name. OnlyWarm runs warm alone (Only is then ignored).
	Only     []string
	OnlyWarm bool
	// PoolTenants is how many tenants the pool memory row serves, and how
	// many function zygotes it is compared with (default 100).
	PoolTenants int
	Progress    io.Writer
}

// Line is one row of the results table.
type Line struct {
	What, Value, Ratio string
}

// Report is the outcome of Run.
type Report struct {
	Machine string
	When    time.Time
	Lines   []Line
}

// Run starts a private daemon, deploys the examples and measures. It
// returns an error when a measurement could not be made.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Python == "" {
		cfg.Python = "/usr/bin/python3"
	}
	if cfg.N == 0 {
		cfg.N = 200
	}
	if cfg.ColdN == 0 {
		cfg.ColdN = 20
	}
	if cfg.Growth == nil {
		cfg.Growth = []int{64, 256, 1024}
	}
	if cfg.Scale == nil {
		cfg.Scale = []int{1, 10, 50}
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.CPUN == 0 {
		cfg.CPUN = 1000
	}
	if cfg.PoolTenants == 0 {
		cfg.PoolTenants = 100
	}
	if cfg.Zygo == "" {
		cfg.Zygo = filepath.Join(cfg.Root, "bin", "zygo")
	}
	work, err := os.MkdirTemp("", "zygo-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	if err := os.Chmod(work, 0o711); err != nil {
		return nil, err
	}
	d, err := startDaemon(ctx, cfg, filepath.Join(work, "state"))
	if err != nil {
		return nil, err
	}
	defer d.stop()
	r := &Report{Machine: machine(), When: time.Now().UTC()}
	b := &runner{ctx: ctx, c: d.client, sock: d.sock, cfg: cfg, work: work, rep: r, daemonPID: d.cmd.Process.Pid}
	steps, err := b.steps(cfg.Only, cfg.OnlyWarm)
	if err != nil {
		return r, err
	}
	for _, st := range steps {
		if err := st.run(); err != nil {
			return r, err
		}
	}
	return r, nil
}

// step is one part of the bench, by the name -only selects it with.
type step struct {
	name string
	run  func() error
}

// StepNames are the bench's steps after warm (which always runs first: the
// others read its figures), in the order they run.
var StepNames = []string{"ideal", "cold", "floor", "node", "growth", "scale", "memory", "pools"}

// ParseOnly reads zygo-bench -only: step names separated by commas, spaces
// around them ignored, "warm" allowed (it runs anyway). It returns the names
// (nil for "" or "warm" alone: every step, or warm only when onlyWarm), or an
// error naming an unknown one and the known ones, so that a typo fails before
// a daemon starts.
func ParseOnly(s string) (names []string, onlyWarm bool, err error) {
	if strings.TrimSpace(s) == "" {
		return nil, false, nil
	}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "warm":
		case slices.Contains(StepNames, name):
			names = append(names, name)
		default:
			return nil, false, fmt.Errorf("-only: no step %q (the steps: warm, %s)", name, strings.Join(StepNames, ", "))
		}
	}
	return names, len(names) == 0, nil
}

// steps returns warm followed by every step, or by those only names, in
// the bench's order (StepNames); with onlyWarm, warm alone. An unknown name
// is an error naming the known ones.
func (b *runner) steps(only []string, onlyWarm bool) ([]step, error) {
	funcs := map[string]func() error{"ideal": b.ideal, "cold": b.cold, "floor": b.floor, "node": b.node,
		"growth": b.growth, "scale": b.scale, "memory": b.memory, "pools": b.pools}
	for _, name := range only {
		if funcs[name] == nil {
			return nil, fmt.Errorf("-only: no step %q (the steps: warm, %s)", name, strings.Join(StepNames, ", "))
		}
	}
	out := []step{{"warm", b.warm}}
	if onlyWarm {
		return out, nil
	}
	for _, name := range StepNames {
		if len(only) == 0 || slices.Contains(only, name) {
			out = append(out, step{name, funcs[name]})
		}
	}
	return out, nil
}

type runner struct {
	ctx       context.Context
	c         *zygo.Client
	sock      string // the daemon's socket: the warm series' invokeConn
	cfg       Config
	work      string
	rep       *Report
	daemonPID int

	helloP50, statsP50, floorP50, nodeP50 time.Duration
	statsCPU                              cpuPerRequest
}

func (b *runner) say(format string, a ...any) { fmt.Fprintf(b.cfg.Progress, format+"\n", a...) }

func (b *runner) add(what, value, ratio string) {
	b.rep.Lines = append(b.rep.Lines, Line{what, value, ratio})
	b.say("  %-52s %-40s %s", what, value, ratio)
}

func (b *runner) deploy(dir string) error {
	_, err := b.c.DeployDir(b.ctx, dir)
	return err
}

func (b *runner) warm() error {
	b.say("warm invoke (HTTP API, unix socket)")
	for _, ex := range []string{"hello", "stats"} {
		if err := b.deploy(filepath.Join(b.cfg.Root, "examples", ex)); err != nil {
			return err
		}
		if _, err := Invoke(b.ctx, b.sock, ex, `{"n": 100}`, 20, 4); err != nil { // warm the path
			return err
		}
		s, err := Invoke(b.ctx, b.sock, ex, `{"n": 100}`, b.cfg.N, 1)
		if err != nil {
			return err
		}
		if ex == "hello" {
			b.helloP50 = s.P50
		} else {
			b.statsP50 = s.P50
			b.profile(ex, s)
		}
		b.add(fmt.Sprintf("warm %s, 1 client (%d requests)", ex, s.N),
			fmt.Sprintf("p50 %.2f ms, p99 %.2f ms, %.0f req/s", ms(s.P50), ms(s.P99), s.Throughput), "")
	}
	zpid, err := b.zygotePID("stats")
	if err != nil {
		return err
	}
	var s Stats
	cpu, err := measureCPU(b.cfg.CPUN, map[string]int{"daemon": b.daemonPID, "zygote": zpid}, func() error {
		var err error
		s, err = Invoke(b.ctx, b.sock, "stats", `{"n": 100}`, b.cfg.CPUN, 8)
		return err
	})
	if err != nil {
		return err
	}
	b.statsCPU = cpu
	b.add(fmt.Sprintf("warm stats, 8 clients (%d requests)", s.N),
		fmt.Sprintf("p50 %.2f ms, p99 %.2f ms, %.0f req/s", ms(s.P50), ms(s.P99), s.Throughput),
		fmt.Sprintf("%.0f%% of the requests found the pool empty (their child was forked for them)", 100*s.Forked))
	b.add("CPU per warm stats request, 8 clients (/proc/PID/stat)",
		fmt.Sprintf("daemon %.2f ms, zygote side (zygote + its children) %.2f ms", ms(cpu["daemon"]), ms(cpu["zygote"])),
		fmt.Sprintf("daemon: target <= 0.5 ms (%s)", met(cpu["daemon"] <= 500*time.Microsecond)))
	return nil
}

// ideal measures the ideal fork-per-request server (ideal.py) with the
// stats example's handler side by side with Zygo's warm stats, in the same
// minutes: at one client blocks of 20 back-to-back requests alternate (Zygo,
// ideal, ideal, Zygo, ...), at 8 clients rounds alternate which goes first. On this kind of
// host the speed moves every absolute figure by a third within minutes, so
// targets 1 and 2 are read from these interleaved series, not from warm's.
func (b *runner) ideal() error {
	b.say("the ideal fork-per-request server (ideal.py), same handler, same pool of 2, alternating with Zygo's warm stats")
	srv, err := StartIdeal(b.ctx, b.cfg.Python, b.work, filepath.Join(b.cfg.Root, "examples", "stats"), "main:handler", 2)
	if err != nil {
		return err
	}
	defer srv.Stop()
	const event = `{"n": 100}`
	if _, err := srv.Invoke(b.ctx, event, 20, 4); err != nil {
		return err
	}
	if _, err := Invoke(b.ctx, b.sock, "stats", event, 20, 4); err != nil {
		return err
	}
	conn, err := srv.Dial(b.ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	zconn, err := dialInvoke(b.ctx, b.sock, "stats", event) // the warm series' client
	if err != nil {
		return err
	}
	defer zconn.Close()
	var zl, il []time.Duration
	zygo := func() error {
		t := time.Now()
		_, err := zconn.Do()
		zl = append(zl, time.Since(t))
		return err
	}
	ideal := func() error {
		took, err := conn.Do(event)
		il = append(il, took)
		return err
	}
	// Blocks of back-to-back requests, as warm's one-client series runs them
	// (a request alternating with the other server's would leave each pool
	// the other's request time to refill).
	const block = 20
	for i := 0; i < b.cfg.N; i += block {
		first, second := zygo, ideal
		if (i/block)%2 == 1 {
			first, second = ideal, zygo
		}
		for _, do := range []func() error{first, second} {
			for j := i; j < min(i+block, b.cfg.N); j++ {
				if err := do(); err != nil {
					return err
				}
			}
		}
	}
	z1, i1 := summarise(zl, 0), summarise(il, 0)
	b.add(fmt.Sprintf("ideal server, 1 client (%d requests, in blocks of %d back to back alternating with Zygo's warm stats)", i1.N, block),
		fmt.Sprintf("p50 %.2f ms, p99 %.2f ms; Zygo's p50 %.2f ms, p99 %.2f ms", ms(i1.P50), ms(i1.P99), ms(z1.P50), ms(z1.P99)),
		fmt.Sprintf("Zygo warm stats p50 / ideal p50 = %.2fx (target <= 1.5x: %s)",
			ratio(z1.P50, i1.P50), met(ratio(z1.P50, i1.P50) <= 1.5)))
	const rounds = 4
	per := max(b.cfg.CPUN/rounds, 1)
	zpid, err := b.zygotePID("stats")
	if err != nil {
		return err
	}
	var zs, is []Stats
	zcpu, icpu := cpuPerRequest{}, cpuPerRequest{}
	// round runs one series of per requests, adding its Stats to into and the
	// CPU of pids to total (per request of all rounds: measureCPU divides by
	// per*rounds).
	round := func(pids map[string]int, total cpuPerRequest, into *[]Stats, series func() (Stats, error)) error {
		var st Stats
		cpu, err := measureCPU(per*rounds, pids, func() error {
			var err error
			st, err = series()
			// Children still exiting after the last answer are reaped, and
			// charged, inside the window (both servers answer before reaping).
			time.Sleep(300 * time.Millisecond)
			return err
		})
		if err != nil {
			return err
		}
		*into = append(*into, st)
		for name, d := range cpu {
			total[name] += d
		}
		return nil
	}
	zygoPIDs := map[string]int{"daemon": b.daemonPID, "zygote": zpid, "client": os.Getpid()}
	idealPIDs := map[string]int{"ideal": srv.PID(), "client": os.Getpid()}
	for r := 0; r < rounds; r++ {
		for k := 0; k < 2; k++ {
			var err error
			if (r+k)%2 == 0 {
				err = round(zygoPIDs, zcpu, &zs, func() (Stats, error) { return Invoke(b.ctx, b.sock, "stats", event, per, 8) })
			} else {
				err = round(idealPIDs, icpu, &is, func() (Stats, error) { return srv.Invoke(b.ctx, event, per, 8) })
			}
			if err != nil {
				return err
			}
		}
	}
	z8, i8 := merge(zs), merge(is)
	tr := z8.Throughput / i8.Throughput
	b.add(fmt.Sprintf("ideal server, 8 clients (%d rounds of %d requests, alternating with as many of Zygo's warm stats)", rounds, per),
		fmt.Sprintf("p50 %.2f ms, p99 %.2f ms, %.0f req/s; Zygo's p99 %.2f ms, %.0f req/s", ms(i8.P50), ms(i8.P99), i8.Throughput, ms(z8.P99), z8.Throughput),
		fmt.Sprintf("Zygo / ideal throughput = %.2fx (target >= 0.6x: %s); p99 %.2f vs %.2f ms",
			tr, met(tr >= 0.6), ms(z8.P99), ms(i8.P99)))
	b.add("CPU per ideal request, 8 clients, the same rounds (/proc/PID/stat)",
		fmt.Sprintf("server + its children %.2f ms; Zygo's daemon %.2f ms, zygote side %.2f ms; the bench's own client (same 2 cores) %.2f ms for Zygo's HTTP, %.2f ms for the ideal's line protocol",
			ms(icpu["ideal"]), ms(zcpu["daemon"]), ms(zcpu["zygote"]), ms(zcpu["client"]), ms(icpu["client"])),
		fmt.Sprintf("Zygo daemon + zygote side / ideal = %.2fx", ratio(zcpu["daemon"]+zcpu["zygote"], icpu["ideal"])))
	return nil
}

// cpuPerRequest is CPU time per request by process role.
type cpuPerRequest map[string]time.Duration

// measureCPU runs series (n requests) and returns, for each named pid, its
// CPU time (its own and its waited-for children's) per request over it.
func measureCPU(n int, pids map[string]int, series func() error) (cpuPerRequest, error) {
	before := map[string]CPUTimes{}
	for name, pid := range pids {
		t, err := ReadCPU(pid)
		if err != nil {
			return nil, fmt.Errorf("reading the CPU of the %s: %w", name, err)
		}
		before[name] = t
	}
	if err := series(); err != nil {
		return nil, err
	}
	out := cpuPerRequest{}
	for name, pid := range pids {
		t, err := ReadCPU(pid)
		if err != nil {
			return nil, fmt.Errorf("reading the CPU of the %s: %w", name, err)
		}
		out[name] = t.Sub(before[name]).Total() / time.Duration(n)
	}
	return out, nil
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// zygotePID is the host pid of fn's zygote.
func (b *runner) zygotePID(fn string) (int, error) {
	fns, err := b.c.Functions(b.ctx)
	if err != nil {
		return 0, err
	}
	for _, f := range fns {
		if f.Name == fn && f.ZygotePID != 0 {
			return f.ZygotePID, nil
		}
	}
	return 0, fmt.Errorf("no zygote pid for %s", fn)
}

// profile adds where the warm path's time goes, from the steps the daemon
// timed for each request (its Server-Timing header; medians), beside the
// series' p50.
func (b *runner) profile(fn string, s Stats) {
	var parts []string
	var sum time.Duration
	for _, ph := range s.Phases {
		parts = append(parts, fmt.Sprintf("%s %.3f", ph.Name, ms(ph.Dur)))
		if !strings.HasPrefix(ph.Name, "child.") { // the child's steps are within wait, or before hello
			sum += ph.Dur
		}
	}
	if len(parts) == 0 {
		return
	}
	b.add(fmt.Sprintf("profile of warm %s, 1 client (daemon-side medians, ms)", fn), strings.Join(parts, ", "),
		fmt.Sprintf("outside the daemon's phases (HTTP, JSON, scheduling): %.2f ms of the %.2f ms p50", ms(s.P50-sum), ms(s.P50)))
}

func (b *runner) cold() error {
	b.say("cold start (mode = \"spawn\": a fresh interpreter per request)")
	src, err := os.ReadFile(filepath.Join(b.cfg.Root, "examples", "stats", "main.py"))
	if err != nil {
		return err
	}
	dir, err := WriteFunction(b.work, "stats-cold", "mode = \"spawn\"\n", string(src))
	if err != nil {
		return err
	}
	if err := b.deploy(dir); err != nil {
		return err
	}
	// Side by side: each cold request alternates with a block of warm ones
	// (back to back, as warm's series), so both p50s come from the same minutes
	// (a slow spell of the host moved cold/warm from 64x to 49x between runs).
	const block = 20
	var cold, warm []time.Duration
	// Both through the warm series' client (invokeConn), one connection each.
	conns := map[string]*invokeConn{}
	for _, fn := range []string{"stats", "stats-cold"} {
		c, err := dialInvoke(b.ctx, b.sock, fn, `{"n": 100}`)
		if err != nil {
			return err
		}
		defer c.Close()
		conns[fn] = c
	}
	timed := func(fn string, into *[]time.Duration) error {
		t := time.Now()
		_, err := conns[fn].Do()
		*into = append(*into, time.Since(t))
		return err
	}
	for i := 0; i < b.cfg.ColdN; i++ {
		warmBlock := func() error {
			for j := 0; j < block; j++ {
				if err := timed("stats", &warm); err != nil {
					return err
				}
			}
			return nil
		}
		coldOne := func() error {
			err := timed("stats-cold", &cold)
			// The cold agent's exit and clean-up run on after its answer: let them
			// finish before the next timed request, of either kind.
			time.Sleep(250 * time.Millisecond)
			return err
		}
		first, second := warmBlock, coldOne
		if i%2 == 1 {
			first, second = coldOne, warmBlock
		}
		if err := first(); err != nil {
			return err
		}
		if err := second(); err != nil {
			return err
		}
	}
	s, w := summarise(cold, 0), summarise(warm, 0)
	b.add(fmt.Sprintf("cold stats (NumPy), concurrency 1 (%d requests, alternating with blocks of %d warm ones)", s.N, block),
		fmt.Sprintf("p50 %.2f ms, p99 %.2f ms; warm p50 %.2f ms (%d requests)", ms(s.P50), ms(s.P99), ms(w.P50), w.N),
		fmt.Sprintf("cold/warm p50 = %.1fx (target >= 50x: %s)", ratio(s.P50, w.P50), met(ratio(s.P50, w.P50) >= 50)))
	return nil
}

func (b *runner) floor() error {
	b.say("the fork floor (a plain python3 with numpy: fork + _exit + waitpid)")
	s, err := ForkFloor(b.ctx, b.cfg.Python, []string{"numpy"}, 0, 300)
	if err != nil {
		return err
	}
	b.floorP50 = s.P50
	b.add("fork floor, python3 + numpy (300 forks)", fmt.Sprintf("p50 %.2f ms, p99 %.2f ms", ms(s.P50), ms(s.P99)),
		fmt.Sprintf("Zygo warm stats p50 / floor p50 = %.2f (target <= 1.0)", ratio(b.statsP50, s.P50)))
	return nil
}

// node compares a Node function served by ready workers (pool_size 2) with
// the same function started cold for each request (pool_size 0) and with
// the Python zygote, and reports what the idle pool costs.
func (b *runner) node() error {
	b.say("Node workers")
	src, err := os.ReadFile(filepath.Join(b.cfg.Root, "examples", "hello-node", "index.js"))
	if err != nil {
		return err
	}
	for _, pool := range []int{2, 0} {
		name := fmt.Sprintf("node-pool-%d", pool)
		dir := filepath.Join(b.work, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		manifest := fmt.Sprintf("name = %q\nruntime = \"node\"\nhandler = \"index.js:handler\"\npool_size = %d\n", name, pool)
		if err := os.WriteFile(filepath.Join(dir, "zygo.toml"), []byte(manifest), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "index.js"), src, 0o644); err != nil {
			return err
		}
		if err := b.deploy(dir); err != nil {
			return err
		}
		n := b.cfg.N / 4
		if pool == 0 {
			n = b.cfg.ColdN
		} else {
			// Let the pool refill between requests, as it would between real ones.
			if _, err := Invoke(b.ctx, b.sock, name, `{}`, 4, 1); err != nil {
				return err
			}
		}
		// Warm: 250 ms between requests, so that each finds a ready worker (a
		// replacement takes about one cold start); cold: back to back.
		gap := 250 * time.Millisecond
		if pool == 0 {
			gap = 0
		}
		s, err := InvokePaced(b.ctx, b.sock, name, `{}`, n, 1, gap)
		if err != nil {
			return err
		}
		label := fmt.Sprintf("warm Node (ready workers, pool_size 2, 250 ms apart), concurrency 1 (%d requests)", s.N)
		ratioText := fmt.Sprintf("Node warm / Python warm hello = %.1fx (target <= 2x: %s)", ratio(s.P50, b.helloP50), met(ratio(s.P50, b.helloP50) <= 2))
		if pool == 0 {
			label = fmt.Sprintf("cold Node (a fresh worker per request), concurrency 1 (%d requests)", s.N)
			ratioText = fmt.Sprintf("cold/warm Node p50 = %.1fx", ratio(s.P50, b.nodeP50))
		} else {
			b.nodeP50 = s.P50
			b.profile("Node", s)
			time.Sleep(2 * time.Second) // the pool refills
			kib := 0
			for _, pid := range workerPIDs(b.daemonPID) {
				if k, err := PSSKiB(pid); err == nil {
					kib += k
				}
			}
			b.add("PSS of the idle Node pool (2 workers)", fmt.Sprintf("%.1f MiB", float64(kib)/1024), "")
		}
		b.add(label, fmt.Sprintf("p50 %.2f ms, p99 %.2f ms", ms(s.P50), ms(s.P99)), ratioText)
	}
	return nil
}

// workerPIDs returns the host pids of Node workers descended from the
// daemon's process.
func workerPIDs(self int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if !strings.Contains(string(cmd), "zygo_worker.js") || strings.Contains(string(cmd), "bwrap") {
			continue
		}
		for p, hops := pid, 0; p > 1 && hops < 16; hops++ {
			if p = parentPID(p); p == self {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

func parentPID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func (b *runner) growth() error {
	b.say("growth with the zygote's resident size")
	var last Stats // the 8-client series of the largest zygote
	for _, mib := range b.cfg.Growth {
		name := fmt.Sprintf("ballast-%d", mib)
		code := fmt.Sprintf("BALLAST = b\"\\x01\" * (%d << 20)\n\ndef handler(event, context):\n    return len(BALLAST)\n", mib)
		// The zygote holds the ballast plus the interpreter: its own group's cap
		// (zygote_memory_mib, default 1024) must leave room for it.
		limits := fmt.Sprintf("[limits]\nmemory_mib = 256\nzygote_memory_mib = %d\n", max(1024, 2*mib))
		dir, err := WriteFunction(b.work, name, limits, code)
		if err != nil {
			return err
		}
		if err := b.deploy(dir); err != nil {
			return err
		}
		s, err := Invoke(b.ctx, b.sock, name, `{}`, b.cfg.N/2, 1)
		if err != nil {
			return err
		}
		f, err := ForkFloor(b.ctx, b.cfg.Python, nil, mib, 100)
		if err != nil {
			return err
		}
		b.add(fmt.Sprintf("warm p50, zygote holding %d MiB", mib), fmt.Sprintf("p50 %.2f ms (floor %.2f ms)", ms(s.P50), ms(f.P50)),
			fmt.Sprintf("Zygo/floor = %.2f", ratio(s.P50, f.P50)))
		m, err := b.cpuAt8(name, `{}`, 0)
		if err != nil {
			return err
		}
		last = m.s
		b.add(fmt.Sprintf("CPU per request, zygote holding %d MiB, 8 clients (%d requests)", mib, m.s.N),
			fmt.Sprintf("daemon %.2f ms and %.1f context switches, zygote side %.2f ms and %.0f page faults, %.0f req/s",
				ms(m.cpu["daemon"]), m.switches, ms(m.cpu["zygote"]), m.faults, m.s.Throughput),
			fmt.Sprintf("daemon / the stats function's daemon CPU = %.2fx", ratio(m.cpu["daemon"], b.statsCPU["daemon"])))
		if err := b.c.RemoveFunction(b.ctx, name); err != nil {
			return err
		}
	}
	// The daemon's CPU per request also grows as requests come further
	// apart (its threads sleep and wake more often per request): the stats
	// function, paced to the rate the largest zygote's series reached, tells
	// the request rate's share from the zygote size's.
	if last.Throughput > 0 {
		gap := time.Duration(float64(time.Second) / last.Throughput)
		m, err := b.cpuAt8("stats", `{"n": 100}`, gap)
		if err != nil {
			return err
		}
		b.add(fmt.Sprintf("CPU per stats request, 8 clients paced to %.0f req/s (%d requests)", last.Throughput, m.s.N),
			fmt.Sprintf("daemon %.2f ms and %.1f context switches", ms(m.cpu["daemon"]), m.switches),
			fmt.Sprintf("daemon / the stats function's daemon CPU unpaced = %.2fx", ratio(m.cpu["daemon"], b.statsCPU["daemon"])))
	}
	return nil
}

// at8 is what cpuAt8 measured: CPU per request of the daemon and of the
// function's zygote side, the zygote side's page faults and the daemon's
// context switches per request (counts: they do not move with the host's
// load as CPU does), and the series' stats.
type at8 struct {
	cpu              cpuPerRequest
	faults, switches float64
	s                Stats
}

// cpuAt8 runs cfg.CPUN requests of fn with 8 clients, gap apart (0: back to
// back), and measures them (at8): the daemon's CPU and context switches, and
// the CPU and page faults of fn's zygote side (the zygote and the children
// it reaped), from /proc.
func (b *runner) cpuAt8(fn, event string, gap time.Duration) (at8, error) {
	zpid, err := b.zygotePID(fn)
	if err != nil {
		return at8{}, err
	}
	if _, err := Invoke(b.ctx, b.sock, fn, event, 40, 8); err != nil { // the pool grows to the load
		return at8{}, err
	}
	var m at8
	var zc, dc [2]Counts
	m.cpu, err = measureCPU(b.cfg.CPUN, map[string]int{"daemon": b.daemonPID, "zygote": zpid}, func() error {
		var err error
		if zc[0], err = ReadCounts(zpid); err != nil {
			return err
		}
		if dc[0], err = ReadCounts(b.daemonPID); err != nil {
			return err
		}
		if m.s, err = InvokePaced(b.ctx, b.sock, fn, event, b.cfg.CPUN, 8, gap); err != nil {
			return err
		}
		if zc[1], err = ReadCounts(zpid); err != nil {
			return err
		}
		dc[1], err = ReadCounts(b.daemonPID)
		return err
	})
	if err != nil {
		return at8{}, err
	}
	n := float64(b.cfg.CPUN)
	m.faults, m.switches = float64(zc[1].Sub(zc[0]).Faults)/n, float64(dc[1].Sub(dc[0]).Switches)/n
	return m, nil
}

// scale measures the stats function with cfg.Scale functions deployed at
// once (stats itself and trivial fork-mode functions, each with its
// zygote and pool, idle): what a request costs must not grow with the
// number of functions the daemon holds (issue 15, "Also measure"). The
// functions earlier steps deployed, but stats, are removed first; the
// fillers are removed after.
func (b *runner) scale() error {
	b.say("growth with the number of functions deployed")
	fns, err := b.c.Functions(b.ctx)
	if err != nil {
		return err
	}
	for _, f := range fns {
		if f.Name != "stats" {
			if err := b.c.RemoveFunction(b.ctx, f.Name); err != nil {
				return err
			}
		}
	}
	deployed := 1
	var fillers []string
	defer func() {
		for _, name := range fillers {
			_ = b.c.RemoveFunction(b.ctx, name)
		}
	}()
	var p50At1, cpuAt1 time.Duration
	var faultsAt1, switchesAt1 float64
	for _, want := range b.cfg.Scale {
		for ; deployed < want; deployed++ {
			name := fmt.Sprintf("idle-%03d", deployed)
			dir, err := WriteFunction(b.work, name, "", "def handler(event, context):\n    return 1\n")
			if err != nil {
				return err
			}
			if err := b.deploy(dir); err != nil {
				return err
			}
			fillers = append(fillers, name)
		}
		if _, err := Invoke(b.ctx, b.sock, "stats", `{"n": 100}`, 20, 4); err != nil {
			return err
		}
		s, err := Invoke(b.ctx, b.sock, "stats", `{"n": 100}`, b.cfg.N/2, 1)
		if err != nil {
			return err
		}
		m, err := b.cpuAt8("stats", `{"n": 100}`, 0)
		if err != nil {
			return err
		}
		if p50At1 == 0 {
			p50At1, cpuAt1, faultsAt1, switchesAt1 = s.P50, m.cpu["daemon"], m.faults, m.switches
		}
		b.add(fmt.Sprintf("warm stats with %d functions deployed (1 client: %d requests; 8 clients: %d)", deployed, s.N, m.s.N),
			fmt.Sprintf("p50 %.2f ms; at 8 clients %.0f req/s, daemon %.2f ms and %.1f context switches, zygote side %.0f page faults a request",
				ms(s.P50), m.s.Throughput, ms(m.cpu["daemon"]), m.switches, m.faults),
			fmt.Sprintf("with %d: p50 %.2fx, daemon CPU %.2fx, its context switches %.2fx, zygote side faults %.2fx", b.cfg.Scale[0],
				ratio(s.P50, p50At1), ratio(m.cpu["daemon"], cpuAt1), fratio(m.switches, switchesAt1), fratio(m.faults, faultsAt1)))
	}
	return nil
}

func (b *runner) memory() error {
	b.say("memory")
	code := "import time\nimport numpy as np\n\ndef handler(event, context):\n    time.sleep(1.5)\n    return 1\n"
	dir, err := WriteFunction(b.work, "pss", "", code)
	if err != nil {
		return err
	}
	if err := b.deploy(dir); err != nil {
		return err
	}
	fns, err := b.c.Functions(b.ctx)
	if err != nil {
		return err
	}
	zpid := 0
	for _, f := range fns {
		if f.Name == "pss" {
			zpid = f.ZygotePID
		}
	}
	// Idle pre-forked children: what the pool costs at rest.
	time.Sleep(2 * time.Second) // the pool fills (one child until traffic asks for more)
	idleKiB, idle := 0, Children(zpid)
	for _, pid := range idle {
		if k, err := PSSKiB(pid); err == nil {
			idleKiB += k
		}
	}
	b.add(fmt.Sprintf("PSS of the idle pre-forked pool (%d children)", len(idle)), fmt.Sprintf("%.1f MiB", float64(idleKiB)/1024), "")
	done := make(chan error, 1)
	go func() { _, err := b.c.Invoke(b.ctx, "pss", []byte(`{}`)); done <- err }()
	time.Sleep(700 * time.Millisecond)
	zpss, err := PSSKiB(zpid)
	if err != nil {
		return err
	}
	kids := Children(zpid)
	if len(kids) == 0 {
		return fmt.Errorf("no child of zygote %d found mid-request", zpid)
	}
	cpss, err := PSSKiB(kids[0])
	if err != nil {
		return err
	}
	if err := <-done; err != nil {
		return err
	}
	b.add("PSS of a zygote with numpy (at rest)", fmt.Sprintf("%.1f MiB", float64(zpss)/1024), "")
	b.add("PSS of a warm child (numpy imported, mid-request)", fmt.Sprintf("%.1f MiB", float64(cpss)/1024),
		fmt.Sprintf("child/zygote = %.2f", float64(cpss)/float64(zpss)))
	return nil
}

// fratio is a/b, or 0 when b is 0 (a figure missing, not an infinite ratio).
func fratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%d cores (%s), Linux %s, %s", runtime.NumCPU(), cpu, strings.TrimSpace(string(kernel)), runtime.Version())
}

// Markdown renders the report as docs/BENCHMARKS.md.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmarks\n\nMeasured by `make bench` on %s, %s.\n", r.When.Format("2006-01-02 15:04 UTC"), r.Machine)
	b.WriteString("Every figure comes from the same run; ratios compare figures measured side by side.\n" +
		"The host is a nested-virtualisation VM: absolute times are slow, ratios are what to read.\n\n")
	b.WriteString("| measurement | value | ratio |\n|---|---|---|\n")
	for _, l := range r.Lines {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", l.What, l.Value, l.Ratio)
	}
	b.WriteString(strings.ReplaceAll(boundsText, "~", "`"))
	b.WriteString(strings.ReplaceAll(warmPathText, "~", "`"))
	b.WriteString("\n## How to reproduce\n\n```\nmake bench          # writes this file and prints the same table\n" +
		"scripts/bench-sandbox.sh   # sandbox checkpoint / restore / fork / rollback vs raw runsc\n" +
		"go run ./cmd/zygo-bench -ab OLD/zygo -zygo bin/zygo [-ab-perf]   # two builds side by side, requests alternating\n" +
		"go run ./cmd/zygo-bench -only growth,scale -out \"\"   # warm and the named steps only; prints, writes nothing\n```\n")
	return b.String()
}

// warmPathText is the before/after account of issue 15's work on the warm
// path, from measured runs (figures quoted, not recomputed); ~ stands for
// a backquote.
const warmPathText = `
## Where a warm request's time goes (issue 15), before and after

Measured on 2 cores shared with other engineers' builds running at the same time: absolute
figures move by 50% between runs, so compare ratios taken side by side in one run. "Before" is
the run at the start of this work (commit 8d780ba plus the new bench), "after" the table above.

| | before | after |
|---|---|---|
| Zygo warm stats p50 / ideal server p50, 1 client | 2.91x (6.31 / 2.17 ms) | 2.17x (8.07 / 3.72 ms) |
| Zygo / ideal throughput, 8 clients | 0.22x (155 / 693 req/s) | 0.20x (91 / 455 req/s) |
| daemon CPU per request (/proc/PID/stat, 1000 requests) | 3.96 ms | 2.5-3.7 ms over three runs |
| zygote side CPU per request (zygote + reaped children) | 8.2 ms | 9.4-12.2 ms (machine load) |
| ideal server CPU per request (server + children) | 2.75 ms | 3.1-4.1 ms |

Daemon side (Go pprof of ~zygo serve --cpuprofile~, bin/bench-daemon.pprof): before, 39% of
the daemon's CPU was deleting each request's cgroup (v1: freeze, walk cgroup.procs in four
hierarchies, thaw, rmdir) and 13% making it; request cgroups are now kept empty and reused
(internal/cgroup PlacePooled/Release: an empty group needs no kill walk; counters reset or
subtracted), so before_go fell from 0.42 to 0.14-0.20 ms. What remains: the HTTP server and
JSON, the SQLite log batch, the request directory (untrusted openat2 walk), inotify.

Child side (the agent's own timing, ~child.*~ in Server-Timing): before hello, the pre-warm's
reseed costs 4.4-4.9 ms of CPU per child (OpenSSL's post-fork DRBG reseed about 1.5 ms, NumPy's
legacy generator 0.7 ms, first-touch copy-on-write faults), descriptors 0.3 ms; after go: stdio
0.1, reseed 0.4-0.6, TMPDIR 0.2, Landlock 0.2, event 0.1, the handler 0.5-0.7 ms. The pre-warm
was racing the request: a child was pooled at hello, before warming, so the next request's
GO waited for it; hello now comes after the pre-warm and the pool keeps one child more than
the peak in flight. The ~wait~ phase (GO sent to result seen, 3.9-4.9 ms) is still about twice
the child's own steps after go: not yet explained (scheduling on the loaded host, the result
file + inotify round trip); the next step is the result in the request socket's last message.

Targets after that round: p50 <= 1.5x ideal NOT met (2.2x); 8-client throughput >= 0.6x NOT
met (0.2x); daemon CPU <= 0.5 ms NOT met; cold/warm >= 50x NOT met (about 30x); Node p50 <= 2x
Python NOT met (about 6x, not worked on).

### Second round (branch warm2)

Five runs of the functions bench on the busy machine (a full test run and two testers beside
it): the first before any change, one after each change. Load moved the absolute figures by up
to 2x between runs (the ideal server's own CPU per request went from 2.8 to 5.6 ms), so read
each run's ratios, not the absolute times across runs.

| | before (run 1) | after each change (runs 2-5) |
|---|---|---|
| Zygo warm stats p50 / ideal p50, 1 client | 2.76x | 2.04x, 2.14x, 2.88x, 3.69x (runs 4-5: the machine's worst load) |
| Zygo / ideal throughput, 8 clients | 0.26x | 0.30x, 0.36x, 0.17x, 0.38x |
| (Zygo daemon + zygote side) / ideal, CPU per request | 3.84x | 3.72x, 2.76x, 3.37x, 2.40x |
| daemon CPU per request | 2.52 ms | 2.07, 2.21, 2.39, 3.05 ms |
| child.pre.reseed (median, per child, before hello) | 4.10 ms | 4.33, 1.70, 1.58, 2.13 ms |
| warm Node p50 / warm Python hello p50 | 7.7x | 9.0x, 7.5x, 3.9x (not kept: see below), 7.0x |

What was cut, each measured:

- **OpenSSL's random machinery built in every child** (the largest zygote-side cost). A
  per-hook timing of the pre-warm's reseed inside the sandbox showed ~ssl.RAND_add~ at 2.8 ms of
  its 4.3 ms; outside the sandbox the same hook costs 0.1 ms after a fork of a process that has
  used OpenSSL's generator, 1.3 ms when it never has (perf: copy-on-write faults on OpenSSL's
  method tables while it builds its DRBGs). The zygote never drew from OpenSSL, so every child
  built them. The zygote now draws one byte before ~ready~ (after the warm-up checks), and a
  child only reseeds: pre.reseed 4.1-4.3 -> 1.6-2.1 ms, zygote-side CPU per request down about
  1.2 ms. The child still ~ssl.RAND_add~s fresh OS bytes after GO, OpenSSL still reseeds on
  fork (TestCaseBH04_OpenSSLRandBytes; agent: OpenSSLAheadTest).
- **The daemon polled pids.current through the child's exit** to release the request cgroup
  (Release: waitNoPIDs every 200 us, 19% of the daemon's CPU in the first round's profile). It
  now waits for the zygote's report that the child was reaped (agentproc.Result.Gone) and finds
  the group empty at its first read: Release fell from 26.6% to 9% of the daemon's samples.
- **A Node worker's stop was on the request path** (runOnce stopped the sandbox before
  answering). The new Node profile row shows it: 20-24 ms of a 32-37 ms warm Node request
  were outside the daemon's phases. The stop now runs in the background (counted by the
  runner's Drain); but the answer still waits for the worker and bubblewrap to exit (the
  sandbox's Done), because what a worker writes on its own fds 1 and 2 is cut and redacted
  over the whole stream at end of file and must be in the request's logs when it answers
  (TestSecretSplitAtACut). Run 4 answered before that exit (3.9x) and failed that test; run
  5 keeps the guarantee: the exit itself (Node's 5 ms or so of teardown, bubblewrap's, the output's
  end of file) is most of those 20 ms, so the ratio did not move much.

Found and left: **moving a process into a cgroup v1 after 50 ms or more of quiet costs 8-16 ms**
(measured: a write of a pid to cgroup.procs after a 50 ms to 1 s gap, any hierarchy; back to
back 0.03-0.1 ms: the kernel's cgroup_threadgroup_rwsem waits for an RCU grace period when
it has not been taken for write lately). It is the Node profile's before_go (7-8.5 ms, the
requests are 250 ms apart), and a paced Python request would pay it too (the Python series
run back to back and do not show it). The way out is to place a pre-forked child or a ready
worker in its request group when it joins the pool, not at GO (the move stays before GO; the
group's counters reset at GO); not done. The wait phase is still about 1-2 ms more than the
child's steps after go; the result over the request socket was not done: the child closes the
request socket before user code (a guarantee), so a result there needs a channel user code
cannot reach. Daemon CPU left: the HTTP server (31% of samples), the SQLite log batch (16%),
Release's counter reads (9%), PlacePooled (6%).

Targets after this round: p50 <= 1.5x ideal NOT met (2.0-3.7x); 8-client throughput >= 0.6x
NOT met (0.30-0.38x); daemon CPU <= 0.5 ms NOT met (2.1-3.1 ms); cold/warm >= 50x NOT met
(21-39x); Node p50 <= 2x Python NOT met (7x; the exit wait and the cgroup move above are
most of it).

### Third round (branch warm)

The machine was far busier than in the rounds above (load average 17-33 on 2 cores from seven
other engineers' builds and tests): every absolute figure is 10-50x the idle machine's, the
ideal server's included, and a whole ~make bench~ took 23 minutes. Wall times were therefore
compared A/B: two daemons side by side (A: the tree before this round, commit 9ed6b53; B: after
it), the same examples deployed on each, requests alternating between them (A, B, B, A, ...),
so that both see the same load. Two changes, each measured that way:

- **The cgroup move is off the request path.** A pre-forked child is moved into a request
  cgroup of its own when it joins the pool (after its hello), and a Node worker once it is
  ready (agentproc ~Spec.Hold~, function ~holdInCgroup~); at GO the daemon only restarts the
  group's CPU count (~cgroup.Group.Begin~: v1 ~cpuacct.usage~ reset, v2 a base) and starts
  Enforce. The idle child is charged to that group while it waits, blocked (it forks and
  allocates nothing; its pre-warm's pages stay charged to the zygote's group; a Node worker's
  idle event loop about 2 ms of CPU, not counted). before_go, A/B medians: Node (250 ms apart)
  1.39 -> 0.064 ms; Python hello back to back 0.74 -> 0.07 ms, paced 0.82 -> 0.06 ms; stats
  0.85 -> 0.05 ms. On this loaded host the kernel's RCU grace periods come fast, so a move
  costs about 1 ms here instead of the 8-16 ms an idle host showed; on an idle host the move
  was most of a paced request's before_go. Daemon CPU per request did not change (the move is
  still the daemon's work, now in the pool filler): A/B over 3 x 300 hello requests at 8
  clients, 5.5-6.2 ms (A) vs 6.0-6.6 ms (B) on this host, within the noise. Guarantees: the
  limits are enforced in a held group (TestLimits: memory, pids, cpu, each in a reused group
  held by a waiting child; TestNodeFunctions for workers); the CPU a child used in its group
  before its request is not the request's (TestBeginCountsCPUFromTheRequest, internal/cgroup);
  a held child is begun before the request's hook, which then places nothing, and an unbegun
  one's group is given back (TestHeldChildIsBegunBeforeItsHook, internal/agentproc).
- **A Node request is answered at its result, not at the worker's exit.** The worker now makes
  fds 1 and 2 themselves the request's ~stdout~ and ~stderr~ files (close, then open onto the
  lowest free descriptor, checked; Node has no dup2), as the Python agent's dup2 does, so what
  is written on fds 1 and 2 directly (~fs.writeSync(1)~, a child with inherited stdio) is in
  the request's files, read and redacted over the whole stream when ~result.json~ appears
  (TestSecretSplitAtACut; agents/node protocol test). runOnce no longer waits for the
  sandbox's Done (the worker's, the pid namespace's and bubblewrap's exit). Warm Node hello
  (250 ms apart, 40 requests each, A/B): p50 92.3 -> 29.0 ms, p90 126.6 -> 47.7 ms.

Python's wall time did not move within the noise of this host (hello p50 153 vs 152 ms back to
back; the ~wait~ phase, GO to the result seen, is 140 ms of it under this load, the child's
own steps summing to 60-80 ms of it: the child is scheduled out on the loaded host). Not done: the result in a message instead of a file and inotify (the child
closes its request socket before user code, so it needs a channel user code cannot reach), the
HTTP server's and SQLite log batch's share of the daemon's CPU, and the zygote side's CPU.

### Fourth round (branch warm): the daemon's CPU per request

Measured A/B as in the third round: two daemons side by side (A: commit 3529271, the tree of
the 06:44 run; B: after each change, the changes cumulative), the stats example on each, 8
clients in rounds of 250-300 requests alternating between them (A B, B A, ...), daemon CPU from
~/proc/PID/stat~ over 1000-1200 requests each; a Go CPU profile and ~strace -c~ of B between
changes said what to cut next. Load moved between 2 and 6 during the work, so read each
line's A beside its B.

| after | A: daemon CPU / request | B | B/A |
|---|---|---|---|
| control files kept open (cgroup) | 5.04 ms | 4.21 ms | 0.84 |
| + the log prune by what it removes, batches gathered | 4.46 ms | 3.53 ms | 0.79 |
| + sized reads of the request's files, the child's steps parsed by hand | 4.81 ms | 3.62 ms | 0.75 |
| + recv's datagram buffers reused | 4.38 ms | 2.76 ms | 0.63 |
| + raw descriptors in internal/untrusted; no Enforce goroutine without cpu_ms or pids | 3.91 ms | 2.22 ms | 0.57 |

The last line's run (load about 2): throughput at 8 clients 100 (A) vs 112 (B) req/s; one
client, 200 requests each alternating: p50 9.85 vs 9.71 ms, p90 17.3 vs 16.4 ms; the time
outside the daemon's phases (HTTP, JSON, the invoke's own steps) p50 0.99 vs 0.71 ms;
before_go 0.059 vs 0.018 ms, result 0.174 vs 0.118 ms, collect 0.069 vs 0.030 ms. System
calls per request (strace -c over a 300-request series): openat 25 -> 4, fcntl 52 -> 19,
close 35 -> 14, read 34 -> 12, failed epoll_ctl 41 -> 10, fstat 16 -> 6. Run again on the
final tree with the host at load 22 (1,200 requests each): 4.61 (A) vs 3.13 ms (B), 0.68;
one client p50 49.0 vs 43.1 ms.

- **A pooled cgroup keeps its control files open** (internal/cgroup files.go): each file is
  opened once, on first use, and read with one ~pread~ at offset 0 (a cgroup file is a
  seq_file: a read at 0 produces its current content again) or written with one ~pwrite~,
  until Delete closes them; a group from Place alone (the sandbox's own) still opens and
  closes each time. Release reuses the counters it read to decide to keep the group for the
  reset (it read them twice), Add writes ~cgroup.procs~ through the kept descriptors, and
  Enforce reads only ~cpuacct.usage~ and ~pids.events~ per tick instead of every counter, and
  not ~cpuacct.usage~ before ~cpu_ms~ divided by the daemon's CPUs has passed (the group
  cannot have used it sooner): a request shorter than that costs no CPU read.
  TestKeptControlFilesReadFreshAndClose reads a counter twice through one descriptor and
  checks every descriptor is closed when the group is deleted; TestLimits, TestEnforce*,
  TestReleasedGroupIsReusedWithItsLimits, TestBeginCountsCPUFromTheRequest unchanged.
- **The log prune costs what it removes.** AppendLogs found the retention's newest row by
  walking the function's index from its newest end on every batch: up to 20,000 entries per
  warm request once a function's logs are full. Each function's row count is now counted once
  and kept (the store's own appends and DeleteFunction keep it true), and only the rows over
  the retention are deleted, found from the oldest end. BenchmarkAppendLogs (a 3-line batch,
  2000 batches into a fresh store): 915 -> 284 us per batch. The log writer gathers a batch
  for up to 50 ms (a Flush, which every log read does, or 1,024 lines end it at once), so
  requests that end close together share one transaction. TestRetentionHeldOverManyBatches.
- **Fewer allocations.** recv allocated a 64 KiB buffer for every datagram: 83% of the bytes
  the daemon allocated per request, and most of its GC. The buffers are pooled (allocated
  bytes over the same series 6x fewer). The request's stdout, stderr and ~result.json~ are
  read into one buffer of the size fstat gives (was io.Copy's 32 KiB buffer per stream), and
  the child's timing steps are parsed without three JSON decodes each.
- **internal/untrusted holds raw descriptors.** Every directory and file it opened was an
  os.File: an fcntl, an fstat and a failed epoll_ctl each. Dir keeps its descriptor, and
  ReadFile, the new Head (at most n bytes and the size the file claimed) and WriteFile work on
  raw descriptors, with the same refusals (tests in internal/untrusted).
- **Pools hold their children in their request cgroups too** (RunnerOptions.Hold for a lane,
  as for functions since the third round): a pool run no longer moves its child into a cgroup
  on the request path; the script's detached mount is closed (which unmounts it, 0.1-0.4 ms
  here) in the background. The pool row above did not move with it (p50 pool/function 1.38x,
  1.33x at 06:44: within this host's noise): the cgroup move was not what separates a pool
  run from a function's; the difference is in the child (the script's import from its mount,
  the nested Landlock domain), not measured here.

~make bench~ after these changes (the table at the top, 07:19, load about 2; the
tree before the last commit, which only moves a CPU read and an unmount; the sandbox section at
the end is the 06:44 run's, not run again: nothing of it changed), beside the 06:44 run: daemon
CPU per request 3.88 -> 2.19 ms; Zygo / ideal throughput at 8 clients 0.35x -> 0.52x; (daemon +
zygote side) / ideal CPU 2.80x -> 2.12x; p50 / ideal p50 1.99x -> 1.99x (the one-client p50 is
the child's: the wait phase).

Targets after this round: daemon CPU per request <= 0.5 ms NOT met (2.2 ms on this host, from
3.9 ms beside it). What is left, from B's profile: when the pre-forked pool runs dry at 8
clients, a child forked and moved into its cgroup on the request path (14% of samples; the
same work the pool filler does otherwise); the Go scheduler waking the goroutines a request
hands off between (HTTP connection, inotify reader, zygote reader, Enforce, release: 14%);
the HTTP server; the SQLite batch (5%); the result's JSON decode. The wall time left on the
daemon side is about 0.9 ms of a 9.7 ms p50; the rest is the ~wait~ phase, in which the
child's own steps after GO are about 3.3 of 4.9 ms. Not done: the result in a message instead
of a file and inotify, the request root kept open for the zygote's life (two system calls a
request), and the per-request goroutines.

### Fifth round (branch warm2): the child's side after GO

Measured A/B as in the third round: two daemons side by side (A: commit adf6cae, the tree
before this round; B: after it), the stats example deployed on each and the stats handler
as a tenant's script of a pool preloading numpy, one client, requests alternating (fn A, fn
B, pool A, pool B; then B first), 200 of each kind per daemon, host load 11-15 (other
engineers' builds and an e2e run beside it); medians of the child's own steps
(~child.*~, ms). The profile said where a child's time after GO goes: copy-on-write faults
of the first use, in each child, of code and data the zygote shares (a single ~prctl~ step
took 0.09-0.12 ms), and one piece of double work.

| | A | B |
|---|---|---|
| warm stats p50, 1 client | 23.68 ms | 17.76 ms (0.75x) |
| warm pool run p50, 1 client | 40.20 ms | 28.47 ms (0.71x) |
| pool / function p50 (same run) | 1.70x | 1.60x |
| function: the child's steps after GO but the handler (sum of medians) | 2.75 ms | 1.68 ms |
| reseed / landlock / stdio / tmpdir / event / dumpable | 1.13 / 0.39 / 0.34 / 0.34 / 0.17 / 0.12 | 0.54 / 0.28 / 0.28 / 0.21 / 0.11 / 0.04 |
| pool: the handler step (script's confinement + import + call) | 19.94 ms | 0.50 + 5.50 + 1.26 = 7.26 ms |
| before hello, per child: pre.reseed (+ pre.rehearse) | 14.9 ms | 10.8 (+1.4) ms; pool 8.6 (+11.6) ms |

- **NumPy's global generator was reseeded twice in every child.** Warm-up's sweep for
  generators outside module globals found the MT19937 bit generator of NumPy's global
  ~RandomState~ (it skipped the ~RandomState~, not what it draws from) and registered it, so
  after the ~numpy_global~ hook (legacy seeding of that MT19937) the ~generators~ hook
  reseeded it again through a new MT19937 and its SeedSequence: 0.49 of the reseed's 0.86 ms
  after GO (a per-hook timing inside the sandbox), and the same again in the pre-warm. The
  sweep now skips both; the stream is reseeded once, by ~numpy_global~ (TestCaseBH01,
  TestWarmupGenerators*, TestPreForkedChildrenStayIndependent). A/B of this change alone
  (150 each): reseed 1.16 -> 0.55 ms, pre.reseed 13.1 -> 6.8 ms.
- **A pre-forked child rehearses its steps after GO before ~hello~** (~_rehearse~ in
  child.py): the request's Landlock ruleset is made with the ~/tmp~ and ~/dev~ rules (after
  GO only the request root's rule is added and the domain entered; the ABI is asked once, in
  the zygote), ~PR_SET_DUMPABLE 0~ again, a read of ~/dev/null~, a JSON decode and encode of a
  constant, a text stream over ~/dev/null~, ~os.environ~ rewritten with its own values. Every
  step still runs in full after GO; the rehearsal pays their first-use faults while the child
  waits (TestProtocol*, LandlockTest with a ruleset made ahead, ~zygo check functions~).
- **The pool child's script path**: the script's import (no bytecode cache: the mount is
  read-only) took 13-18 ms of a pool run, almost all of it the compiler's and importlib's
  first use in the child (an import outside the sandbox, in a forked child of a process with
  numpy: 2-9 ms; the same after one compile in that child: less). The child now compiles a
  constant module source and looks a name up with a ~FileFinder~ before ~hello~, and makes
  its nested domain's ruleset with the device rules (only the request directory's rule is
  added after GO); the shared-pool seccomp program is built once in the zygote. New steps
  ~script.confine~ and ~script.import~ time it. Pool tests (agent and e2e), ~zygo check
  pools~ unchanged.

The wall time did not fall as much as the child's steps: the ~wait~ phase (GO sent to the
result seen) is 15.8 ms in B's function runs against 3.1 ms of the child's steps, and 25.7
vs 8.8 ms in B's pool runs: at this load most of a request is waiting for a CPU (the child
after GO, the daemon after the result; the replacement child's pre-warm runs beside the
next request). The pre-warm's CPU moved, it did not vanish: a pool child's rehearsal costs
11.6 ms before ~hello~, about what its import saved; the reseed fix is a real cut (pre.reseed
-4 to -6 ms per child). Targets: pool / function p50 <= 1.3x NOT met (1.60x in this run,
1.70x for A beside it; the script's import is still 5.5 ms); Zygo / ideal p50 not measured
here (no ~make bench~ run in this round).

### Sixth round (branch warm): where the zygote side's CPU goes, the result channel, Node's steps

Measured A/B with the new ~zygo-bench -ab A_BIN -zygo B_BIN~ (internal/bench ab.go): two
daemons side by side (A: commit a432d3d, the tree of the 09:19 run; B: this branch), the stats
example on each, 4 rounds of 300 requests at 8 clients alternating which daemon goes first, then
200 one-client requests each, alternating one by one; ~-ab-perf~ counts, per request, system
calls, page faults and context switches with ~perf stat~ (the daemon; the zygote with every
child it forks) and the minor faults of the zygote and of its reaped children from
~/proc/PID/stat~. The host ran other engineers' builds and an e2e run beside it: CPU times
move by 10% between two daemons of the same build (an A/A run), the counts do not.

The whole round, A against B at its last commit, run when the host had quietened (load 2-5):

| per warm stats request | A | B | A/A spread |
|---|---|---|---|
| daemon CPU, 8 clients (/proc/PID/stat) | 1.13 ms | 1.07 ms (nothing changed there) | 10% |
| zygote side CPU, 8 clients | 5.94 ms | 5.54 ms (0.93) | 5% |
| throughput, 8 clients | 180 req/s | 224 req/s (1.24) | |
| zygote side: system calls / page faults | 115.3 / 1216 | 114.3 / 1125 (-7.5%) | 0.2 / 6 |
| minor faults of the zygote itself / of its children | 219-221 / 997 | 167-168 / 959 | 211-217 / 999 |
| p50 / p90, 1 client (400 each, alternating) | 4.52 / 11.8 ms | 4.50 / 10.1 ms | |
| child.pre.reseed / reseed / handler | 0.99 / 0.21 / 0.49 ms | 0.53 / 0.15 / 0.71 ms | |
| the ideal server (server + children), same host | 33 system calls, 660 faults (server 87, children 573) | | |

The first run of the round's first changes (below), on the loaded host: daemon 2.13 vs 1.94 ms,
zygote side 9.47 vs 8.87 ms (0.94), 61 vs 66 req/s, faults 1212 vs 1186.

**The zygote side's CPU is copy-on-write faults.** ~perf record -a~ of the python3 processes
under load: page faults (~do_wp_page~ and the page copy, ~filemap_map_pages~ for text pages a
fork does not copy), ~fork~'s page-table copy (12%) and ~exit_group~'s teardown (20%) are most
of it; the interpreter itself is a small part. Per request Zygo's zygote side took 1186 faults
and 114 system calls where the ideal server takes 660 and 33 (beside them on the loaded host:
8.9 ms of CPU against the ideal's 3.7-4.7 ms). Where a child's 1000 or so faults
happen (a build whose step timer read ~ru_minflt~ instead of the clock, 50 requests): from the
fork to the child's first line 252 (a bare ~python3~ that imported numpy: 247; with ~-S~ and
nothing imported: 66; ~threading~'s at-fork reinitialisation alone: +140; ~random~'s: +33),
to ~_serve~ 80, pre.fdreset 50, pre.privatise 9, pre.reseed 206 (NumPy's legacy seeding from 8
words: 154 of them), ~hello~ to ~go~ 45, pre.rehearse 100-110, then after GO close_socket 10,
stdio 10, reseed 5, tmpdir 13, landlock 9, the handler 100, the rest under 5 each; then the
result's write and the exit. The pre-warm does not add faults, it moves them before GO (a build
without it: 1234 vs 1219 per request, the same within the spread): what costs is what the agent
does at all, per child — the reseed hooks, the descriptor reset, Landlock, the messages — and
the zygote's own loop, which faults on every page it writes after each fork (its children
share them): 184-226 a request against the ideal server's 87.

Cut in this round (each A/B alone, zygote faults a request): the zygote's check for threads
before each fork returns at once when ~/proc/self/task~ lists one task (it built the whole
report, naming threads, every time): 214 -> 195; the agent's wire keeps one JSON encoder
(~json.dumps~ with options made a new one per message): 191 -> 186; the zygote formats its
~forked~ message directly (the same bytes; a build that counted the zygote's faults per part of
its loop found 85 of its 194 or so right after the fork, in closing the socket's copy and sending
~forked~ through the JSON encoder; the flush before the fork 22, the thread check 4, the fork
17): 184 -> 164.
Tried and not kept: running the reseed hooks and the JSON encode once in the zygote before the
first fork, so that the state they build on first use is shared (-80 faults in a plain fork
outside the sandbox, -12 in the daemon's children: not worth the change); no pre-warm at all
(above).

Then **NumPy's global generator is reseeded with a whole MT19937 key** (~set_state~ of 624 words
from ~os.urandom~, or from the reseal's seed) instead of ~seed()~ of 8 words, whose array
conversion and ufunc checks touched about 150 of the zygote's pages in every child
(reseedcore.py, shared with the sandboxes' reseal; the SDK's copy regenerated). A/B of this
change alone (2 x 300 at 8 clients, then 300 one-client requests each): the children's faults
1001-1005 -> 961-962 a request (zygote side 1185 -> 1139), zygote side CPU 8.62 -> 8.07 ms
(0.94), pre.reseed 0.81-1.37 -> 0.46-0.64 ms, reseed after GO 0.19-0.30 -> 0.15-0.20 ms; the
stats handler's step 0.45-0.60 -> 0.60-0.82 ms: part of what ~seed()~ touched is NumPy's ufunc
machinery the handler uses, which the handler now pays itself (a handler that does not use it
pays nothing). On the request path that is +0.10 to +0.2 ms of the child's steps, for -0.4 to
-0.7 ms of CPU per child; the one-client p50 was lower in both runs (6.23 -> 5.44 and 8.51 ->
7.39 ms: less CPU competes with the request). TestCaseBH01, TestPreForkedChildrenStayIndependent,
the reseedcore tests (the copies diverge) and internal/guest's unchanged.

**The result over the request's channel: built, measured, not kept.** B' carried the result
on a pipe made per request whose write end went with GO (SCM_RIGHTS; one frame, an 8-byte
length then the result object, read at most ~max_response_kib~, the read end closed once the
outcome is known so the pipe is no channel afterwards). It failed two guarantees with their
tests: ~TestStrayDescriptorsDoNotReachRequests~ (a request holds descriptors 0-2 only: the
write end is a fourth one user code can find in ~/proc/self/fd~) and
~TestProtocolRule3_NoChannelToSupervisor~ (a request that writes forged messages to every
descriptor still gets its answer: its forgery became its frame's length and the request failed
as ~response_too_large~). A descriptor held through user code cannot be kept from it, so the
child would have to get its channel after the handler, by name from the request directory (a
FIFO the daemon opens for reading ahead): then the request's code can reach it by name as it can
reach ~result.json~, for the same trust and about the same system calls as the inotify watch.
And the pipe saved nothing on the daemon: 185.1 vs 185.4 system calls per request (pipe2, a
non-blocking flag, two epoll_ctl, the reads and two closes replace inotify_add_watch,
inotify_rm_watch, openat2, fstat, read, close and one unlink); before_go +0.024 ms (the pipe),
go +0.016 ms (the descriptor), the result's read -0.018 ms; the child 2 system calls and 20
faults fewer. ~result.json~ and inotify stay.

**The daemon's CPU** (1.12 ms a request on the idle host, target 0.5 ms): ~strace -c~ over about 480
requests at 8 clients counts 185 system calls and ~perf~ 60 context switches a request.
About 70 of the calls are the Go runtime's (nanosleep 43, futex 16, epoll_pwait 14): sysmon and
the Ms woken for each hand-off between goroutines (HTTP connection, inotify reader, zygote
reader, pool filler, log writer, release). The rest: pwrite 14 (SQLite's WAL 6 a request at
this load's two-request batches, the cgroup counter resets 4-5), close 14, read 11, fcntl 10,
pread 9 (~pids.current~ 1.5), unlinkat 8 (2 of them failing with EISDIR: ~untrusted~'s removal
tries unlink before rmdir), openat2 6, getdents 6, recvmsg 5, openat 4 (the request root
~req/~ opened by path twice a request), epoll_ctl 4 (2 failing: ~os.NewFile~ on directories),
fchownat 3, fstat 3, mkdirat 2, sendmsg 2. Each is a few per cent; the lever for the 0.5 ms is
the hand-offs (each wakes an M and costs the runtime's spinning), then the request directory's
dozen calls (kept open; removal by ~d_type~). Not done in this round.

**Node.** The worker now times its own steps after ~go~ (~close_socket~, ~stdio~, ~tmpdir~,
~event~, ~handler~, ~encode~ in result.json's ~steps~, passed on as ~child.*~ like the Python
child's; agents/node protocol test), and rehearses them before ~ready~ (a ~go~ parsed, JSON
decoded and encoded, a write through the request's file writer to ~/dev/null~), so V8 compiles
their code off the request path. A/B of the rehearsal (the same tree without it, hello-node
with pool_size 2, 100 requests each 250 ms apart, twice): stdio 0.47-0.55 -> 0.32-0.37 ms,
encode 0.04 -> 0.016 ms, tmpdir and event -0.01 to -0.02 ms, close_socket 0.63-0.72 -> 0.72-0.82
ms (higher in both runs, not explained; a rehearsal of the socket's destroy on a socket without
a descriptor did not change it); the steps' sum 1.70-1.94 -> 1.58-1.79 ms. The worker's steps
are a quarter of the ~wait~ phase (6.7-9.6 ms on this host): the rest is the delivery of ~go~
to an idle Node process and the way back (~result.json~, inotify), which the steps do not see;
p50 A/B 8.6 vs 9.7 and 11.5 vs 11.4 ms: within the host's noise.

Targets after this round (no ~make bench~ on an idle host in it): throughput >= 0.6x the ideal
NOT met as far as measured (B/A 1.24x at 8 clients on the quiet host, 1.07x on the loaded one:
if the quiet host's ratio holds on the idle one, about 0.5x from 0.41x; the zygote side is 1125
faults a request against the ideal's 660); daemon CPU <= 0.5 ms NOT met (unchanged: the system
calls above); Node <= 2x Python not measured (the ratio needs the idle host). Of the met
targets, p50 <= 1.5x the ideal: the NumPy reseed change moves 0.15-0.2 ms of faults into the
stats handler's step (one-client p50 A/B 4.52 vs 4.50 ms); cold/warm and the profile are
unchanged.

### Seventh round (branch warm2): the daemon's system calls and hand-offs per request

Measured A/B with ~zygo-bench -ab A_BIN -zygo B_BIN -ab-perf~ (A: commit a388584, main at the
start of the round; B: this branch after each change, the changes cumulative), the stats
example, 4 rounds of 300-500 requests at 8 clients alternating which daemon goes first, then
one-client requests alternating one by one. Other helpers' e2e runs shared the host (load 4-6;
28-230 requests a second at 8 clients, against about 220 on the quiet host), so CPU times and
latencies move with it; the counts per request (~perf stat~) do not. A count by system call
(~perf stat~ of the syscall tracepoints over 600 requests at 8 clients, each build alone) said
which calls went after each change.

| per warm stats request, 8 clients | A | B, final | A/B runs of B before its last changes (first change; third; fifth) |
|---|---|---|---|
| daemon system calls (4 rounds) | 158-177 | 119-128 (-27%) | 168-181 vs 148-155; 155-158 vs 120-124; 161-165 vs 119-123 |
| daemon context switches | 37-54 | 32-41 (-22%) | 49-59 vs 55-58; 36-38 vs 33-38; 40-45 vs 33-35 |
| daemon CPU (/proc/PID/stat) | 1.63 ms | 1.34 ms (0.82) | 1.74 vs 1.71 (0.98); 1.31 vs 1.28 (0.98); 1.59 vs 1.45 (0.91) |
| throughput | 123 req/s | 116 req/s (0.95: A's rounds ran at 73-243 req/s as the load moved) | 225 vs 218; 159 vs 170 |
| zygote side CPU | 7.73 ms | 7.61 ms (0.99: nothing changed there) | |

| after (cumulative; one build at a time, 600 requests at 8 clients) | system calls | context switches | futex / epoll_pwait / nanosleep | read / close / fcntl / getdents64 / unlinkat |
|---|---|---|---|---|
| A | 160.2 | 40.5 | 16.7 / 16.8 / 15.9 | 12.5 / 14.0 / 7.8 / 6.0 / 8.0 |
| request root and directories kept open, removal by ~d_type~, no read to see EOF, one-shot watch, the cgroup release on the request's release goroutine | 136.2 | 43.7 | 16.6 / 16.2 / 16.9 | 7.9 / 9.0 / 6.2 / 2.0 / 6.0 |
| + the child's hello awaited directly | 132.1 | 42.5 | 14.7 / 14.5 / 17.1 | 7.6 / 9.0 / 6.2 / 2.0 / 6.0 |
| + request sockets without ~net.FileConn~ | 118.2 | 31.7 | 14.2 / 14.3 / 11.4 | 7.6 / 8.1 / 3.7 / 2.0 / 6.0 |
| + the release run by the zygote reader | 115.1 | 30.4 | 12.4 / 14.0 / 11.2 | 7.5 / 8.0 / 3.6 / 2.0 / 6.0 |
| + a group with leftovers released off the reader (one pread more); A again beside it: 161.0, 42.1 | 124.7 | 35.7 | 14.0 / 16.7 / 13.7 | 8.1 / 8.0 / 3.9 / 2.0 / 6.0 |

The Go runtime's calls (futex, epoll_pwait, nanosleep) and the context switches depend on timing
as well as on the work: read them as a trend, the other calls as exact.

- **The request root stays open** for the zygote's life (Process.root, opened in makeDirs,
  closed by Stop): it was opened by path twice a request (making the next pooled directory,
  then taking it). **A request directory stays open from its making to its removal**: a pooled
  one is no longer opened again when a request takes it, and its removal walks it through that
  descriptor (untrusted.Dir.RemoveSub).
- **Removal by ~d_type~, one listing** (internal/untrusted, every RemoveAll): an entry that
  getdents reports as a directory is first removed as an empty one (a request's ~tmp/~ usually
  is), anything else first unlinked; the other is tried only when the kernel says the entry is
  of the other kind (the sandbox may have swapped it). The old walk tried unlink before rmdir on
  every directory (2 failing calls a request), opened each as an os.File (a fcntl and a failing
  epoll_ctl) and listed each twice with a seek between; a directory is now listed again only
  when its rmdir finds it not empty (at most 64 passes). TestRemoveSubWalksTheOpenDir (600
  entries, nested directories, links not followed, a FIFO), TestRemoveAllRemovesLinksNotTheirTargets,
  TestRemoveRequestDirLeavesTargetsAlone.
- **No read to see the end of a file**: a short read of a regular file is its end, and a file
  empty when opened (stderr, usually) is not read: ~result.json~, ~stdout~ and ~stderr~ cost
  one read each (were two).
- **The result watch is one-shot** (~IN_ONESHOT~): the kernel removes it at the rename and
  queues its ~IN_IGNORED~ with the event, so the inotify reader wakes once a request; the watch
  used to stay until the directory's removal, whose ~IN_IGNORED~ woke the reader a second time.
  A first rename onto another name ends the watch without an answer: that request waits for the
  child's exit, as without inotify.
- **The child's ~hello~ is awaited directly**, not the zygote's ~forked~ first: one wake-up of
  the pool filler fewer a child. A failed fork closes the zygote's copy of the request socket
  before its ~fork_error~ (zygote.py), which ends the wait for ~hello~; the ~fork_error~ then
  says why (docs/protocol.md, step 2).
- **Request sockets without ~net.FileConn~**: our end of a socket pair is a pollable os.File
  read and written with recvmsg and sendmsg through its RawConn (agentproc fdConn); net.FileConn
  dup'ed it and asked for its flags, type and both addresses, about ten calls a child where this
  makes four. TestPacket*, TestStream*, TestPassCred, TestSendDescriptor and TestPeerClosed run on it.
- **No goroutine per request after the answer.** The cgroup's release ran on a goroutine of its
  own per request, waiting for ~Gone~; it now runs where the request is released (agentproc
  ~Result.OnGone~; the Manager still counts it for Shutdown). And a fork child's request is
  released by the zygote reader when the child's ~exited~ arrives (~whenExited~), not by a
  goroutine per request waiting on a channel for it; a child lingering 2 s past its deadline is
  still killed through its pidfd and released 5 s later if its exit never comes, and the releases
  still waiting when the zygote dies run once the sandbox is gone. A request whose cgroup still
  holds processes (left behind by the request) is released on a goroutine of its own, as
  before: Release waits for them up to 200 ms, then kills them (Group.Empty, one read of
  ~pids.current~, decides; TestReleaseDeletesGroupWithLeftovers and
  TestReleasedGroupIsReusedWithItsLimits check it). The request directory's removal stays on
  the reader: a request that fills its directory with many files delays that zygote's other
  releases (not its answers, nor its forks: the filler no longer waits for ~forked~).
  TestPlantedFilesInTheRequestDir now also plants a valid result renamed early by a process
  that goes on running: answered at once, and nothing of it left afterwards (it passes on A
  too; with the kill taken out it still passes, through the 5 s release, whose cgroup Delete
  kills the process).

Where the daemon's CPU goes now (~perf record -g~ of B's daemon before its last change, 1,200
requests at 8 clients):
27% of the samples in ~finish_task_switch~ and 8% in the irq-restoring unlocks after it, that is
the threads' sleeps and wake-ups (the context switches above); in a Go profile (~zygo serve
--cpuprofile~, after the first change) the largest parts are
the system calls (49% of its samples, kernel time: the request directory's removal 9%, the v1
cgroup moves of the pool filler 6-8%, the socket pair 4%), the scheduler (15%) and the
HTTP server and JSON. Most nanosleeps are sysmon's 20 us ticks (strace: 515 of 526 over ten
one-client requests, all on one thread), which run whenever some P is busy or in a system call
and restart at 20 us each time the daemon wakes from idle: they follow the daemon's busy wall
time. The one-client series did not separate A and B at this load (p50 B/A 1.21, 0.89, 0.93, 1.23
and 1.10 in five runs of 200-400 requests each, load 4-7; the child's steps equal). The ~wait~
phase (GO to the result seen) read 0.94-1.17x in B over six runs; B before the release on the
zygote reader against B after it (after/before) read 1.12x in one run and 0.93x in the other, and A/A and
B/B runs beside them spread 0.95-1.09 (p50) and 0.96-0.99 (wait): within this host's spread,
to be measured again on the idle host.

Targets after this round: daemon CPU per request <= 0.5 ms NOT met (1.34 ms against A's 1.63
ms on the loaded host, 0.82x; 1.12 ms was the last idle measure of A, so about 0.9-1.0 ms
expected there). Not done, in order of
what the counts say: fewer thread wake-ups (each hand-off left: the HTTP connection, the pool
filler's kick and its hello, the inotify reader, the zygote reader's ~exited~; sysmon's ticks
follow them); the v1 cgroup moves (four ~cgroup.procs~ writes a child, each a migration that can
wait for an RCU grace period); the cgroup's ~cpuacct.usage~ written twice for a held child
(Release's reset and Begin's); the pool filler's per-child JSON and ~forked~ read.

### Eighth round (w8-node): a warm Node request, go to answer

Measured A/B with ~zygo-bench -ab A_BIN -zygo B_BIN -ab-function hello-node -ab-gap 250ms
-ab-rounds -1~ (A: commit ae3ac03, main at the start of the round; B: this branch after each
change), paced one-client requests alternating between the daemons, and with a harness that
drives the real ~zygo_worker.js~ as the daemon does (a socket pair at fd 3, ~ready~, a pause,
~go~, ~result.json~ awaited by inotify) with hooks that time what the worker's steps do not
see: from ~go~'s send to the worker's read callback (delivery), from there to the first step,
and the worker's system calls and faults from ~go~ to the rename. Other helpers' builds and
tests shared the host (load 1.5-9), and page faults were slow on it all round: a copy-on-write
fault took 20-45 us (4,096 in 75-187 ms in a forked python3, measured three times), so the
Python hello example ran at a p50 of 38-39 ms here (2.02 ms in the table above) and the Node /
Python ratio of the target cannot be read on this host; ~make bench~ on the idle host gives it.

The whole round, A against B at its last commit (200 requests each, 250 ms after each, load
1.3-2.7):

| warm hello-node, 1 client | A | B |
|---|---|---|
| p50 / p90 | 15.75 / 31.00 ms | 6.81 / 9.55 ms (0.43 / 0.31) |
| wait (GO sent to the result seen) | 11.86 ms | 4.02 ms (0.34) |
| child.close_socket / stdio / tmpdir / event | 2.08 / 0.90 / 0.20 / 0.15 ms | 0.27 / 0.18 / 0.06 / 0.10 ms |
| child.handler / encode | 1.18 / 0.03 ms | 1.11 / 0.03 ms |
| harness, 30 each: go's delivery to the worker's callback (median) | 1.46 ms | 0.35 ms |
| harness: the worker's system calls / page faults from go to the rename | 31 / 24 | 25 / 11 |

Python did not move (it shares none of the changed code): hello back to back, 300 each, p50
39.12 vs 38.69 ms (0.99), wait 30.23 vs 30.20 ms.

Where the time went, and what was cut (each A/B alone, on the tree before it):

- **close_socket was the stream's teardown and ~process.stderr~.** ~net.Socket.destroy()~ runs
  the stream's destroy machinery for the first time, and net's ~_destroy~ tests
  ~this !== process.stderr~, which makes ~process.stderr~ (a tty check, an fstat, loading the
  synchronous file stream's module): 1.0-2.6 ms of close_socket in the harness. The worker now closes the
  socket's libuv handle itself (~uv_close~ stops reading and closes fd 3 at once; no listener
  is called again) and still checks fd 3 gone, with one fstat fewer. **stdio** made
  ~process.stdout~ (the same getter) to replace its ~write~; a getter in front of Node's now
  notes whether user code used either stream before ~go~: only then is ~write~ replaced, else
  Node makes the stream on first use, on the request's file (new agent test). **The read of
  ~go~** goes through ~net.Socket~'s ~onread~ buffer, not the readable stream's machinery (a
  standalone reader, 25 each in one run: ~go~ to the callback 1.53 -> 1.15 ms median; node in a
  blocking read 0.88, python3 in one 0.52). And the rehearsal before ~ready~ now also runs the
  line reader, a step, the check of a closed descriptor (fstat's EBADF, whose error Node builds
  from a table made on first use) and a failing rename. Daemon A/B: close_socket 2.71 -> 0.38
  ms, stdio 0.85 -> 0.28 ms, wait 16.0 -> 8.1 ms, p50 21.7 -> 12.7 ms.
- **The replacement worker started beside the request** that took its predecessor: a Node
  start-up is about 40 ms on the idle host (the cold Node row above), 90-175 ms of CPU for a
  worker's whole life in the harness on this one, against the request's own worker and the
  daemon on 2 cores. The pool's filler now waits, while another worker is still ready, until
  the requests in flight on the pool have their outcome and 5 ms more for their answers, 20 ms
  at most (~workerPool.settle~; at once when none is ready, so a busy pool refills as fast as
  before; TestWorkerPoolRefillWaitsForTheRequest). Starting at the outcome alone: wait 6.43 ->
  4.54 ms, p50 9.61 -> 7.96 ms, p90 23.6 -> 12.2 ms; the 5 ms more, two runs with the roles
  swapped: p50 10.12 -> 7.45 and 8.63 -> 7.55 ms, the wait 6.02 -> 5.00 and 5.07 -> 4.89 ms
  (the start had run beside the daemon's answer). The A/B tool's ~-ab-gap~ now follows every
  request, not each pair, so one daemon's replacement does not run beside the other's request.
- **The delivery of ~go~**: a worker's first read of fd 3 ran Node's read path (~onStreamRead~,
  the callback into JavaScript) for the first time on ~go~. The supervisor now sends a ready
  worker ~{"type":"warm"}~ once, which it reads and ignores (docs/protocol.md): harness, 50
  each, delivery 1.09 -> 0.71 ms median, faults 14 -> 12; daemon A/B wait 3.94 -> 3.67 ms, p50
  6.66 -> 6.45 ms.
- **First calls compiled on the request path.** V8 compiles a function declaration on its first
  call; ~serve~, ~prepare~, ~closeControl~, ~redirectStdio~, ~setTmpdir~, ~writeResult~ and
  ~finish~ first run after ~go~. They are now parenthesized function expressions, which V8
  compiles with the module (marked ~// EAGER~): harness, callback to the first step 0.54 ->
  0.31 ms; daemon A/B wait 3.04 -> 2.66 ms, p50 5.63 -> 5.14 ms, close_socket 0.28 -> 0.20,
  stdio 0.24 -> 0.14, tmpdir 0.09 -> 0.05 ms.

Tried and not kept: the worker lowering its priority before its exit (its teardown is 8-12 ms
of CPU after the rename on this host, beside the daemon's answer): p50 0.99, p90 0.94x, within
the noise. Killing itself after the rename instead of ~process.exit~: the teardown's CPU 11.7
-> 8.1 ms (the kernel's share stays), for an exit status that would no longer say the result is
in. Rehearsing the read path on a real socket made before ~ready~ (an abstract unix socket and
a connection to it): 17-21 ms more per worker start (the standalone reader's delivery 1.38 ->
1.15 ms); the ~warm~ message runs the same path at no start-up cost. Waiting for ~go~ with a
read on libuv's thread pool: a thread blocked in ~read~ would hold up ~process.exit~ (libuv
joins its threads at exit) in every exit while idle.

What is left on the Node side, from the last harness and daemon runs on this host: delivery of
~go~ 0.35-0.7 ms (a python3 blocked in a read: 0.3-0.5 ms in the same kind of harness), the
callback to the first step 0.3 ms, the steps 1.6 ms (most of it the example handler's own first
calls), the result's write and rename 0.3 ms. The worker's steps cost more than their system
calls because code run once before is slow again after the idle wait on this host: a
~path.join~ already run took 30-150 us when called again after a sleep of 1-250 ms (or after
100 ms of other work), 9 us back to back. Target 5 (Node p50 <= 2x Python): not measured in
this round; A's 5.04 ms on the idle host less what B saved in the steps alone (about 1.1 ms at
the idle host's A figures) would be about 3.9 ms, 1.9x, before the delivery, first-call and
replacement savings above; to be confirmed by ~make bench~ on the idle host.

### Eighth round (w8-zyg): the zygote side's pages — what a forked child touches, on this host

Measured A/B with ~go run ./cmd/zygo-bench -ab A/zygo -zygo B/zygo -ab-perf -out ""~ (each
binary embeds its agent; its ~zygo_rand.so~ beside it), the stats example, 4 rounds of 300
requests at 8 clients, then 200 one-client requests each; A is ae3ac03 (main at the start of
the round), B this branch after each change. Other helpers' builds and tests shared the host
(15-25 requests a second at 8 clients, against about 280 on the idle host): read the counts,
and the CPU as B/A of one run. Between changes, the agent was also run outside bwrap by the
agent tests' fake supervisor, two zygotes side by side with requests alternating one by one
(300 each; CPU from ~/proc/PID/stat~, zygote and reaped children).

**What a fault costs here.** The host is a PVM guest: the hypervisor shadows the guest's page
tables. Measured with a python3 + NumPy parent that forks (4,000 pages each, load 3-8): a child
*reading* pages it inherited costs 6-8 us a page the first time, although the guest counts no
fault (the hypervisor builds its own entry; the time shows as the child's user time); writing
them (copy-on-write) 18-25 us a page, of which ~perf record~ puts most in the TLB flush of
~do_wp_page~ (35% of a fork/exit loop's CPU); on transparent huge pages, reading costs 0.45 us
a page. A system call costs about 1.4 us. So what matters is how many distinct pages a child
touches, read or written, and how many of them it writes. A warm stats child (~clear_refs~ at
the fork, ~Referenced~ of ~/proc/self/smaps~ before its result) touches about 745 pages of
machine code (python3.11 324, NumPy's ~_multiarray_umath~ 126, libc 113, libcrypto 43), 173
of read-only data and 1,186 of writable memory, about 780 of which it writes (the ideal
server's child writes 483: 236 by the first line after the fork, 81 for its seeding, 166
for the handler and JSON). Where a child's time went (~perf~, agent outside bwrap, before the
loop in C): user 45-52% (the interpreter and the hypervisor's hidden entries),
copy-on-write 30%, the entry of every page fault 16%, creating files on ext4 4%.

| per warm stats request, 8 clients | A | B | B/A |
|---|---|---|---|
| zygote side CPU (loaded host) | 83.3 ms | 67.5 ms | 0.81 |
| zygote side system calls | 114.9 | 70.2 | 0.61 |
| zygote side page faults (perf) | 1129 | 880 | 0.78 |
| minor faults of the zygote / of its children | 166 / 965 | 45.5 / 837 | |
| daemon CPU | 4.11 ms | 3.90 ms | 0.95 (unchanged code) |
| throughput (loaded host, rounds 14-25 req/s) | 20.8 req/s | 22.4 req/s | 1.08 |
| p50 / p90, 1 client | 40.4 / 92.3 ms | 40.0 / 60.2 ms | 0.99 / 0.65 |
| side by side outside bwrap, CPU per request (two runs) | 60.8, 62.6 ms | 50.5, 51.9 ms | 0.83, 0.83 |
| PSS of the zygote (outside bwrap, after 5 requests) | 24.1 MiB | 27.2 MiB | +3.1 MiB |

Each change, A/B against the build before it (zygote side CPU; counts per request):

- **Fewer system calls and objects per child and per loop** (e6c9c49; 0.88x, system calls
  114.8 -> 69.6, faults 1129 -> 1007, zygote 171 -> 108): the zygote receives into a buffer
  made once, recognises ~{"type":"fork","seq":N}~ without the JSON decoder, formats
  ~forked~/~exited~ directly, reads the wake-up pipe once, and counts threads with one ~stat~
  of ~/proc/self/task~ (its link count is 2 plus the threads; the listing stays the fallback);
  ~flags & (MSG_TRUNC | MSG_CTRUNC)~ ran enum code (~Flag.__and__~, ~EnumType.__call__~) on
  every datagram: the mask is a plain int now; the child drops its copies with C calls
  (~signal.signal~ converted the old handler to an enum, raising and catching ~ValueError~).
  In the child: the request socket made with its family and type (no ~getsockname~,
  ~getsockopt~), ~hello~ formatted directly with the uid and gid asked once, no link read for
  the descriptors fdreset keeps, the reseed hooks' bytes drawn with one ~getrandom~ (each hook
  still gets bytes of its own) and the hooks in one table (no closure made per call;
  reseedcore.py, SDK copy regenerated), ~event.json~ read with ~open~/~fstat~/~read~/~close~
  (Python's ~open().read()~ made nine calls), ~TMPDIR~ checked with one ~stat~, no text stream
  over ~BytesIO~ in the pre-warm (it built a decoder no request uses), ~os.path~ calls replaced
  where the path is already absolute and normal. The Landlock ruleset was made once, by the
  zygote, and shared by every child as a template (ten system calls and four ctypes calls a
  child fewer); **reverted after review**: a ruleset is one kernel object, and a child's code
  running before GO with its descriptor open (a handler's ~zygo_prewarm~, an import's at-fork
  hook) could add a rule that widened every later child's domain. Each child makes its own
  again.
- **The interpreter's code on huge pages** (b2261b2; 0.95x, children's faults 901 -> 863;
  outside bwrap 0.89x): before ~ready~ a fork-mode zygote copies each 2 MiB range wholly inside
  the interpreter's read-only file mappings into a collapsed transparent huge page
  (~MADV_COLLAPSE~) and moves it over the original (~mremap~ ~MREMAP_FIXED~): the same bytes
  at the same addresses, never written, so whole in every child, which then pays once per
  2 MiB instead of once per page of python3.11's code. Costs: about 4 MiB of private memory
  per zygote (children share it), the read-only data in those ranges becomes executable, and
  ~perf~ or ~py-spy~ see those ranges as anonymous memory; **made opt-in after this round** (~ZYGO_HUGE_TEXT=1~ in the agent's environment: its 4 MiB counted against ~zygote_memory_mib~ and a function sized to its limit no longer deployed, TestZygoteKilledByLimitIsRestarted; on by default again since the fourteenth round, within half of ~zygote_memory_mib~), and
  a range the kernel refuses is left as it was. NumPy's code on huge pages too measured 0.96x
  more, not done: workload-specific, 4 MiB more per zygote.
- **The child's steps in one function** (25ddc22) and **the fork-mode zygote's loop in C**
  (f8f39fd; both 0.94x, zygote faults 109 -> 45; outside bwrap the zygote's own CPU 6.5 ->
  3.4 ms a request, 0.93x): ~zygo_fork_loop~ (agents/native/zygo_fork.c, built into the
  ~zygo_rand.so~ every fork-mode zygote preloads) forks what the supervisor sends, after the
  agent's flush and the thread check, with the interpreter's own fork sequence (the ~os.fork~
  audit event, ~PyOS_BeforeFork~, the at-fork hooks), and reaps and reports every child; any
  other datagram or problem goes back to zygote.py, which does it as before. Without the
  guard, or with ~ZYGO_NATIVE_LOOP=0~, the Python loop serves; test_nativeloop.py runs the
  protocol, rules and cases tests on both.

Tried and not kept: giving the code mappings an ~anon_vma~ (one byte rewritten through
~/proc/self/mem~) so that ~fork~ copies their page-table entries: 160 page faults fewer per
child and no CPU saved (1.00x side by side: the faults it removes are the cheap kind, the
hypervisor's entries remain); transparent huge pages for the anonymous heap and arenas
(~MADV_COLLAPSE~): no gain (1.00x and 1.09x in two runs; Python writes reference counts
everywhere, which splits them); ~malloc_trim~ in the zygote: nothing to return; pinning hot pages so that ~fork~ copies
them eagerly (io_uring registered buffers): io_uring is refused by the sandbox's filter, and
should stay so. Guarantees: the agent tests (136, including test_nativeloop and
test_hugetext), ~TestProtocol*~, ~TestStrayDescriptorsDoNotReachRequests~,
~TestPreForkedChildrenStayIndependent~, ~TestCaseBH*~, ~TestLimits~, ~TestCheckFunctions~
(~zygo check functions~), ~TestWarmupGenerators*~, ~TestNativeRand*~, ~TestPlanted*~ pass
unchanged.

What is left on the zygote side, by the counts: threading's at-fork hook is 133 faults of every
child (NumPy imports threading; the ideal server pays it too); the agent's own steps still
write about 250 pages more than the ideal child's seeding (the reseed hooks 150, the rehearsal
and the steps after ~go~ about 100, the ~hello~/~go~ exchange 40, fdreset 40), most of them
reference counts of the objects its Python code touches; NumPy's, libc's and libcrypto's code
(about 280 pages a child) are not on huge pages. Target 2 (8-client throughput >= 0.6x the
ideal's) needs an idle-host ~make bench~: with the zygote side at 0.81x of 5.55 ms (about 4.5
ms) and the daemon's 0.89 ms, the CPU per request would be about 5.4 ms against the ideal's
2.86 ms, about 0.53x; 0.6x needs about 4.8 ms all in, so the daemon's share (the lead's work)
and the agent's remaining steps both count.

### Eighth round (lead): the daemon's side, and probes

Run on the host while helpers' builds and A/B runs shared it (load 5-12): times are inflated
several-fold (a copy-on-write fault cost 20-30 µs here against about 4 µs idle); counts and
A/B ratios are what to read.

- **The daemon's context switches, by cause** (~perf record -e sched:sched_switch
  --call-graph fp~ of ~zygo serve~ over 25 s of 8-client stats load, 18,040 switches):
  sysmon's ~usleep~ 40%, its deep-sleep futex 9%, the netpoller's ~epoll_wait~ 15%, idle Ms'
  ~stopm~ 8%, ~runqgrab~'s spin 3%; the rest a percent or less each (the result watcher, the
  HTTP connection and its background read, cgroup v1 moves waiting for an RCU grace period,
  225 in D state). sysmon restarts its 20 µs ticks (50 of them before backing off) each time
  a goroutine enters a system call while every P was idle: the daemon's idle-to-busy
  transitions, a few per request, pay it. The Go runtime offers no setting for it.
- **~GOMAXPROCS=1~ for the daemon** (~zygo-bench -ab~ of the same build with and without it,
  4 rounds x 300 at 8 clients, twice): system calls per request 175 -> 150 and 159 -> 138,
  context switches 79 -> 63 and 62 -> 45, daemon CPU 0.95x and 0.91x, but throughput 0.93x in
  both runs and one-client p50 0.98x and 1.13x: one P serialises the daemon's work behind its
  slow system calls. Not kept.
- **Log rows inserted 32 to a statement** (BenchmarkAppendLogs, now also a 16-request batch
  of 48 rows): 0.96-1.17 ms a batch before, 0.89-1.17 ms after, allocations 796 -> 526: the
  cost is SQLite's B-tree and index work per row, not database/sql's per statement. Not kept.
- **Where the zygote side's CPU goes in the kernel** (~perf record -a -g~, the python3
  processes under 8-client load): 50% of their samples are page faults (35% copy-on-write,
  15% others), and most of a copy-on-write fault is its TLB flush (~flush_tlb_mm_range~ 19%,
  ~smp_call_function_many_cond~ 11% of all samples); fork's page-table copy 2%, exit 4%. A
  probe outside the daemon (a 16 MiB heap, a child writing 1,000 of its pages) costs the same
  per fault pinned to one CPU, migrated between the two, or left free: the cost is the fault
  and the paravirtualised flush on this nested host, not inter-processor interrupts.
- **Python's after-fork work** (~PyOS_AfterFork_Child~): a probe forking from C without it
  costs the child 7 faults, with it 226-233 (threading's at-fork hook alone 147, random's
  reseed 22). The zygote's own forks were given a short path skipping threading's hook when
  the threading state is pristine (the zygote forks single-threaded): faults from the fork to
  the child's first line 250 -> 147; but over the child's whole life (A/B, 2 rounds of 300 at
  8 clients) 963/965 -> 954/953: the pages the hook touches are touched again by the child's
  later steps. What a child costs is the union of the zygote's pages it writes, not any one
  step's. Not kept.
- **A fork loop in C** (probe: a numpy process forking and reaping 300 children): the parent's
  faults per fork 28.7 with the smallest Python loop, 6.8 from C. The zygote's own faults were
  being cut in Python in this round (above); not built.

### Ninth round (lead): the Go scheduler's monitor, and what a request waits for

This session's host is another of the same kind (Linux 6.18.44-fc-v1045, 2 cores) with the
earlier cost model: a forked child reads a page it inherited in 0.2-0.3 us (6-8 us on the
eighth round's host) and writes one in 3-40 us (copy-on-write; it moves with load), and the
stats handler's step takes 0.7-1.0 ms (10 ms there).

- **sysmon kept out of its deep sleep** (~GODEBUG=schedtrace=2147483647~, internal/cli
  sysmon_linux.go): when every P is idle Go's monitor thread sleeps on a note, and the first
  system call after that wakes it with its tick reset to 20 us for 50 rounds before it backs
  off; the daemon goes idle and busy several times a request, so it paid those ticks again and
  again (~perf record -g~ of the daemon under 8 clients: 14% of its CPU in sysmon's
  ~nanosleep~ context switches). With ~schedtrace~ set the runtime never takes that sleep, so
  the ticks back off once to 10 ms and come back to 20 us only when sysmon has a P to retake.
  The runtime reads GODEBUG before ~main~, so ~zygo serve~ re-executes itself with it (same
  pid, arguments and descriptors) and gives its children the caller's ~GODEBUG~ back; a
  caller's own ~schedtrace~ stands (the re-execution comes before the CLI's signal handlers,
  and keeps the process's name). A/B on the idle host, the same build run without and with
  the setting (~zygo-bench -ab~, 4 rounds of 300 at 8 clients, then 200 one-client requests):

| per warm stats request | A (default) | B (schedtrace) | B/A |
|---|---|---|---|
| daemon CPU, 8 clients | 1.658 ms | 1.266 ms | 0.76 |
| daemon system calls / context switches (perf stat) | 117.8 / 32.6 | 100.2 / 14.5 | 0.85 / 0.44 |
| zygote side CPU | 8.39 ms | 8.75 ms | 1.04 (unchanged code) |
| throughput, 8 clients | 180.5 req/s | 180.5 req/s | 1.00 |
| p50 / p90, 1 client | 5.28 / 11.48 ms | 5.10 / 9.62 ms | 0.97 / 0.84 |

- **What a one-client request waits for** (~perf record -a~ of the scheduler's switch and
  wake-up events and the request's system calls, back-to-back requests): the ~wait~ phase
  (GO sent to result seen) is about 1.3 ms longer than the child's own steps after GO, and the
  trace shows where: GO and the pool's replacement fork request leave the daemon together, so
  the GO'd child wakes on a CPU where the zygote's fork (about 1.8 ms) and the new child's
  pre-warm are runnable too, and waits behind them; the request whose child ran at once
  finished 2.0 ms after GO. Requests paced 20 ms apart (the refill done before the next
  arrives) read p50 3.93 ms and wait 2.62 ms against 4.24 and 2.96 ms back to back (same
  build): the refill's share of a one-client p50 is about 0.3 ms. Deferring the refill until
  the request ends (while another child waits in the pool) moved it rather than removed it:
  wait 0.80x, p50 0.97x, p90 1.15x (the next request now meets it). Not kept.
- **The refills below the requests** (internal/agentproc/priority.go): instead, a pooled
  zygote's nice value is raised by 4 once ready (a lower priority), its children inherit
  that, and the daemon lowers a child's back by as much right before GO (a ~getpriority~ and
  a ~setpriority~ a request; a value the import, the child or an operator chose stands). A/B against the build before (helpers' builds and tests loading the host, load
  4-8, so read the ratios): one-client p50 0.73x (8.28 vs 11.29 ms), ~wait~ 0.72x, p90 0.99x,
  daemon CPU 0.92x, zygote side 0.95x; an earlier run of the same idea at nice +10 read p50
  0.87x but p90 1.47x (a request that finds the pool empty waits for a fork done at the low
  priority), and at +4 p50 0.76x, p90 0.98x; +4 is kept.

- **What holds 8-client throughput below 0.6x of the ideal on this host** (0.40-0.47x: Zygo
  212-250 req/s, the ideal 417-530 req/s). On this host the zygote side's CPU per request
  (5.2-7.6 ms) is about twice the ideal server's (3.1-3.5 ms; ~/proc/PID/stat~, both under
  8 clients), and ~perf record -a~ puts about 77% of the zygote side's samples in the kernel:
  fork's page-table copy, copy-on-write faults (~copy_mc_enhanced_fast_string~, ~do_wp_page~)
  and exit's teardown; Python's own code is the rest. Counted per request with ~perf stat~:
  the zygote side 79 system calls and 946 page faults against the ideal server's 24 and 450.
  Where a warm stats child's faults fall (medians over 200 one-client requests, a build whose
  step timer counted ~ru_minflt~ instead of time): pre-warm descriptors 55, shared-memory
  privatisation 10, reseed 153, rehearsal 143; after GO every step together 33 and the
  handler 149; about 350 more before the pre-warm (the interpreter's at-fork hooks,
  ~threading~'s among them) and after the last step (the result file, exit). The ideal child
  seeds with 81 faults; Zygo's reseed covers more generators (OpenSSL's, ~uuid~'s, NumPy's
  legacy and new ones, ~random~), and the rehearsal pays, before GO, the faults the steps
  after GO then skip. On the eighth round's host, where a fault cost 5-6x more and the
  ideal's child was slow for the same reason, the same tree read 0.64x.

### Ninth round (w9-cg): cgroups and request directories per child

What the daemon does per child in its v1 cgroups and its request directory, counted by file
(~strace -f -y -e trace=pwrite64,pread64 -p DAEMON~ over 200 requests of the stats example at
8 clients, and ~strace -c -f -p DAEMON~ over 600, each build alone), then cut to what the
answer needs. A: main at b8ceea2; B: this branch. Both daemons ran through wrapper scripts
with the same ~GODEBUG=schedtrace=2147483647~, each with its build's ~zygo_rand.so~ beside it.

| per warm stats request, 8 clients | A | B |
|---|---|---|
| cgroup control-file writes (~strace -y~, 200 requests) | 9.1: ~cgroup.procs~ x4, ~memory.max_usage_in_bytes~, ~memory.failcnt~, their memsw twins, ~cpuacct.usage~ at each Release and again at Begin for a held child (31 of 200 requests here) | 6: ~cgroup.procs~ x4, ~memory.max_usage_in_bytes~, ~cpuacct.usage~ once (when the group is taken, or at Begin) |
| cgroup control-file reads (same trace) | 10: ~pids.current~ x3, ~cpuacct.usage~, ~memory.max_usage_in_bytes~, ~memory.failcnt~, ~memory.memsw.failcnt~, ~memory.oom_control~, ~pids.events~, ~memory.usage_in_bytes~ | 7: the same less ~pids.current~ x2 and ~cpuacct.usage~ |
| pread64 / pwrite64 (~strace -c~, 600 requests, two runs each; pwrite64 includes SQLite's WAL, 2.6-3.2) | 10.2, 10.2 / 12.6, 13.0 | 7.2, 7.2 / 9.6, 9.2 |
| getdents64 / fchmod / fchownat / fchown (same runs) | 2 / 1 / 3 / 0 | 1 / 0 / 2 / 1 |
| all daemon system calls (same runs) | 102.1, 106.7 | 93.0, 91.7 |
| daemon system calls (~zygo-bench -ab -ab-perf~, 4 rounds; run 1 at load 9 / run 2 at load 5) | 100.8-105.1 / 97.6-100.6 | 90.6-99.3 / 89.4-93.4 |
| daemon context switches (same rounds) | 15.2-17.6 / 14.1-15.0 | 14.8-18.9 / 13.7-15.7 |
| daemon CPU (/proc/PID/stat, same rounds) | 1.166 / 1.124 ms | 1.074 / 1.166 ms (0.92 / 1.04) |
| throughput; one-client p50; its ~dir~ phase | 151 / 204 req/s; 6.85 / 3.76 ms; 0.062 / 0.046 ms | 142 / 199 req/s; 6.23 / 3.94 ms; 0.054 / 0.038 ms |

Two A/B runs of the branch before its last change (~event.json~ by descriptor), at load 1.4-6
and 8-10, read the same: system calls 98.1-104.6 vs 91.4-94.2 and 103.2-112.7 vs 99.2-108.6,
daemon CPU 0.99x and 0.91x. The request directory's mkdirat 2, openat2 5 and unlinkat 6 a
request are unchanged.

- **One ~cpuacct.usage~ write a child, where it counts from.** A kept v1 group's CPU counter is
  no longer reset by Release: it is marked stale, and reset when the group is taken again,
  before the move (PlacePooled: counts from the placement), or for a held child by Begin alone
  (new HoldPooled, which function.holdInCgroup and the pools' hold use: counts from GO, one
  write where there were two). A held group given back without a request is judged by its
  memory and pids counters: the stale CPU time is not its own. TestHeldGroupCountsCPUFromBegin
  (a group whose requests add up past cpu_ms counts none of it after Begin; a held child that
  burns more than cpu_ms waiting and is dropped leaves the group kept; the next PlacePooled of
  it reads under 5 ms before its process runs).
- **No reset of what is 0 or read by nothing.** ~memory.failcnt~ and ~memory.memsw.failcnt~ of
  a kept group are always 0 (a fail count is MemoryLimitHit, which deletes the group), and
  ~memory.memsw.max_usage_in_bytes~ is read by nothing: Release writes only
  ~memory.max_usage_in_bytes~.
- **Release reads what its decision needs.** Not ~pids.current~ again (the wait before it, or
  the new TryRelease, just read 0), not ~cpuacct.usage~ without a cpu_ms limit or while it is
  stale. function's releaseWhenGone read ~pids.current~ (Group.Empty) and then Release read it
  again: TryRelease reads it once and releases the group when it is empty, else leaves it to
  Release on a goroutine, as before. TestReleasedGroupIsReusedWithItsLimits,
  TestReleaseDeletesGroupWithLeftovers, TestGroupThatHitPIDsIsNotKept,
  TestGroupStillChargedIsNotKept and TestBeginCountsCPUFromTheRequest unchanged.
- **~event.json~ owned through its descriptor** (untrusted.WriteFileAs, also for a script's
  files): created with its mode, fchown on the open file, no fchmod unless the daemon's umask
  (read once from /proc/self/status) would take bits of the mode away: create, write, fchown,
  close, where WriteFile and Chown made create, write, fchmod, close, fchownat.
  TestWriteFileAsOwnsItsFile (owner, group and exact mode, a 0666 file under umask 022, a
  planted symlink refused and its target not chowned).
- **One getdents a request directory.** The removal walk's first pass takes a getdents that
  left room for one more entry (280 bytes, the largest linux_dirent64) as the end of the
  listing; the final rmdir checks it, and a directory found not empty is listed again to the
  real end, as before. TestRemoveSubRacesAWriter: a writer creating files through its own
  descriptor during RemoveSub, 20 rounds, the directory and all it got removed each time.

Which hierarchies a child is moved into, here: ~cpuacct~, ~freezer~, ~memory~, ~pids~ (this
host mounts ~cpu~ and ~cpuacct~ apart; ~cpu~ is not used, cpu_ms is watched through
cpuacct), each written once; co-mounted hierarchies were already written once
(Manager.hierarchies). Those four writes are what is left of the cgroup work per child (Add,
6.9-7.0% of the daemon's Go profile samples in A and B over 2,000 requests each, against 9.0%
and 8.5% for all control-file access: too few samples, 2 s, to read more than a direction).
At 8 clients the pool ran dry for most requests (169 of 200 in A's trace, under strace,
made no Begin: their child was forked for the request and moved on its path). The four
moves' wall time (~strace -T~, B, 300 requests): the first move of a child (~cpuacct~, first
in order) p50 39 µs, p90 6.2 ms, p99 15 ms, 29 of 213 over 1 ms; the three after it 19-25 µs
each. The long ones are the wait for an RCU grace period on the cgroup migration lock (a sleep,
not CPU), paid on the request path by a child forked for its request, by the pool filler for
a held one.

Tried or counted, and not kept:

- **Reusing a request directory** (emptied through its descriptor, renamed to a fresh token):
  counted, it makes as many calls as removing and making one (13): getdents and 5 unlinkat to
  empty it, a seek and a getdents to check it empty, mkdirat and fchownat for a fresh ~tmp/~,
  fchmod (the sandbox owns the directory and may change its mode), flistxattr (it may set
  user xattrs or ACLs on it on tmpfs), renameat; against getdents, 6 unlinkat and close to
  remove it and mkdirat, openat2, mkdirat and 2 fchownat to make one. A reused inode also
  keeps a result watch left by a request that ended without its rename. Not built.
- **Not moving a child into the freezer hierarchy** (one move of four): Kill freezes the group
  so that nothing forks between reading its pids and signalling them; without it a request
  that forks in a loop could outrun the kill rounds. Left alone.
- ~pids.events~ skipped for groups without a pids limit (one read): a refusal by the
  zygote's own limit can be counted in the request's group on v1 (the task's own group), and
  a kept group would carry it unseen. Not done.

Targets after this round: daemon CPU per request <= 0.5 ms NOT met (1.1-1.7 ms on this
host, B/A 0.91-1.04 over four runs: within the host's noise). The per-child cgroup and
request-directory calls cut here are 9 of the daemon's 100-105 system calls a request; the rest are the Go runtime's (futex,
epoll_pwait, nanosleep: 20-26), the request socket and its pidfd, the HTTP connection, the
result and log files, and SQLite.

### Ninth round (w9-json): the daemon's own code per request

A Go CPU profile of the daemon under 8-client stats load (3,300 requests, 3.26 s of samples,
about 1 ms of daemon CPU a request) put ~encoding/json.Unmarshal~ at 8.6% (readResult 6.4%:
result.json and its ~steps~, one reflective decode per step; recv 2.1%: hello, forked,
exited) and ~mallocgc~ at 5.5%. What was cut, with the allocations of each piece before and
after (Go benchmarks with ~b.ReportAllocs~, on this shared host; the times move with its
load, the counts do not):

| piece (benchmark) | allocations | bytes | time |
|---|---|---|---|
| readResult of a stats result.json, 17 steps (BenchmarkReadResult) | 62 -> 10 | 6,312 -> 1,624 | 20.0 -> 14.5 µs |
| recv of hello, forked, exited (BenchmarkRecv, socket included) | 37 -> 7 | 2,353 -> 1,027 | 16.5 -> 11.0 µs |
| send of fork and go (BenchmarkSend, socket included) | 12 -> 2 | 1,072 -> 224 | 8.9 -> 8.2 µs |
| answerRequest, 25 Server-Timing steps (BenchmarkAnswerRequest) | 16 -> 5 | 2,640 -> 728 | 2.3-2.7 -> 1.1-1.5 µs |
| id, redactor, log rows (BenchmarkRequestBookkeeping) | 10 -> 4 | 464 -> 448 | 0.6-1.0 -> 0.6 µs |

and Result.Phases no longer grows from 1 to 32 entries (five growths a request): the
Result holds room for the eight daemon steps and the child's 24.

- **result.json's steps** are decoded by ~stepPhases.UnmarshalJSON~: the list's bytes, which
  ~json.Unmarshal~ has already validated whole, are cut into elements by tracking strings and
  nesting, each read by the existing ~parseStep~, and kept as phases directly (known names
  only, each once, at most 24, into an array in the decoded struct): no slice, map or string
  per step. A ~steps~ that is not a list or null still fails the result; the rest of the
  file is decoded by ~json.Unmarshal~ as before. ~FuzzStepPhases~ holds it to a reflective
  decode of each pair (same error or none, same phases, same value; a minute, 810,000 runs).
- **The result's value** is kept as the bytes of the buffer read (~resultValue~), not copied
  once more by ~json.RawMessage~ (readResult reads a fresh buffer for each result).
- **The agents' per-request messages** (~{"type":"exited","seq":S,"pid":P,"code":N}~ and
  kin, written by zygote.py and child.py without spaces) are read by ~quickMessage~, which
  takes only those exact forms (known type, known keys once each, non-negative integers of at
  most 18 digits); anything else goes to ~json.Unmarshal~. ~FuzzQuickMessage~ checks that what
  it takes decodes to what ~json.Unmarshal~ gives (a minute, 1.1 million runs).
- **fork and go** are written by ~quickEncode~, byte for byte what ~json.Marshal~ writes
  (~TestQuickEncodeIsMarshal~, ~FuzzQuickEncode~), when every string is printable ASCII
  without a quote, backslash or HTML character; else ~json.Marshal~.
- **recvmsg and sendmsg** through the poller no longer allocate a closure and its captured
  results per call (a pooled ~msgOp~ holds both), and recv's control buffer is part of its
  pooled datagram buffer.
- **The answer and the log rows**: Server-Timing is appended into one stack buffer
  (~wire.AppendServerTiming~, which ~FormatServerTiming~ now uses) instead of a ~[]wire.Timing~
  copy and a ~strings.Builder~; the answer's four header values share one array; the request
  id and the success status line are built with ~strconv~ instead of ~fmt.Sprintf~; and
  ~redact.New~ returns nil at once for a request without secrets.

A/B (~zygo-bench -ab~ of the branch's base against it, both daemons with
~GODEBUG=schedtrace=2147483647~ through wrapper scripts, 4 rounds of 300 at 8 clients):

| | A (base) | B (w9-json) | B/A |
|---|---|---|---|
| daemon CPU per request, 8 clients | 1.116 ms | 1.083 ms | 0.97 |
| zygote side CPU per request, 8 clients | 7.858 ms | 7.724 ms | 0.98 |
| throughput, 8 clients | 133.1 req/s | 111.0 req/s | 0.83 |
| p50, 1 client | 6.379 ms | 5.883 ms | 0.92 |
| go | 0.030 ms | 0.021 ms | 0.70 |
| result | 0.082 ms | 0.064 ms | 0.78 |

The daemon's CPU per round ranged 0.90-1.23 ms for A and 1.00-1.17 ms for B: the host's load
moves it more than the change. The daemon's user time alone (~/proc/PID/stat~, 2,000
requests at 8 clients after 300 to warm, alternating daemons, 4 runs each): A 0.605, 0.495,
0.435, 0.435 ms, B 0.400, 0.380, 0.500, 0.430 ms a request (means 0.49 and 0.43): about
0.06 ms less, within the noise of single runs. The cut is real in the counts (about 110
allocations and 10 KB fewer a request, and the reflective decodes gone) but small against
the system calls, which remain most of the daemon's CPU. Left alone: the SQLite log batch
(multi-row insert was tried in the eighth round), net/http's own work per request, and the
~json.Unmarshal~ of the rest of result.json (its validation and the value's scan are needed).

### Tenth round (lead): what grows with the zygote's size and the number of functions

The bench now measures what issue 15's "Also measure" asks for and it lacked: the daemon's CPU
per request beside the warm p50 for each zygote size (64, 256, 1024 MiB), and the stats
function's warm p50, daemon CPU and throughput with 1, 10 and 50 functions deployed (the
others trivial fork-mode functions, each with its zygote and pool, idle). Run alone:
~go run ./cmd/zygo-bench -only growth,scale -out ""~.

- **The number of functions**: three runs of ~-only scale~ on this shared host read p50
  4.93/3.81/3.35 ms, 3.09/3.71/5.52 ms and 3.83/2.72/5.04 ms at 1/10/50 functions: no
  direction, the host's other load moves it more. Counted instead (~perf stat~ of the daemon
  and of the whole host over 1,500 stats requests at 8 clients, the same daemon with 9 idle
  functions deployed and then removed, twice each): daemon system calls 91.3/91.3 a request
  with them and 92.5-95.9 without, context switches 14.6-14.7 and 14.4-15.7, page faults on
  the whole host 958.5-958.9 and 1,005-1,096 (the host busier): nothing a request costs grows
  with the functions deployed. Two daemons side by side, one with the stats function alone and
  one with 49 idle functions beside it, 1,500 requests at 8 clients each, alternating: daemon
  CPU 0.83/0.88, 1.25/1.09 and 1.13/1.13 ms a request (the host's load moved both by 50%
  between rounds). The bench's rows now count, beside the CPU, the zygote side's page faults
  and the daemon's context switches per request: in a run of ~-only scale~, 958/961/958
  faults and 14.5/14.5/15.6 switches at 1/10/50 functions. The idle daemon itself: 3.3 ms of
  CPU a second with one function, 7.8 ms with 50 (each zygote's pool looks at its target once
  a second, ~poolTick~).
- **The zygote's size**: the daemon's CPU per request grows in the 8-client rows (0.70, 0.86,
  1.27 ms at 64, 256, 1024 MiB in one run) while the rate falls (230, 139, 46 req/s: each
  request forks the whole zygote when the pool runs dry). The bench's paced row shows that
  the rate is what costs, not the size: the stats function paced to the 1 GiB series' rate
  reads 1.59 ms a request. One client, back to back and 10 and 20 ms apart: 0.77, 1.23 and
  1.53 ms a request. Counted (~perf stat~, one client 20 ms apart against 8 clients back to
  back): 130 against 92 system calls a request, futex 12 against 5, ~epoll_pwait~ 18.6
  against 12, context switches 22 against 14.5: requests that come apart find the daemon's
  threads asleep and pay for waking them, each time. An idle daemon uses 0.35% of a CPU
  (sysmon's 100 wake-ups a second).

Kept this round, then undone for a security defect:

- **The request's Landlock domain entered before ~hello~** (agents/python child.py
  ~enter_domain_ahead~): every request directory is directly beneath ~/run/zygo/req~, so a
  pre-forked child entered the domain step 5 would enter, with that root's rule, while it
  waited; after GO the step only checked that ~dir~'s parent was that root. A/B (~-ab~, 400
  one-client requests, a loaded host): ~child.landlock~ 0.097 -> 0.011 ms, the new
  ~child.pre.landlock~ 0.131 ms before ~hello~; one-client p50 0.88x, ~wait~ 0.95x (the
  host's load moved both more than the 0.09 ms cut). A review then showed that a grant on
  the whole root is what let a request read, change and answer for another request of its
  zygote once it learnt that request's directory name (which leaks through
  ~/proc/net/unix~); the domain now grants a request its own directory only, and reading
  files beneath everything else but the root, so it can be entered only once ~dir~ is known,
  after GO, as before (docs/security.md). Entering it ahead again needs the directory known
  before ~hello~: the supervisor would pair each pre-forked child with a request directory
  made ahead (both pools exist) and say which in the fork message. Not done.

Where the rest of a one-client ~wait~ goes (an experiment build stamping GO with the
daemon's ~CLOCK_MONOTONIC~ and the child reading it, 300 one-client requests, medians): GO
sent to GO received and decoded in the child 0.25 ms (the child's wake-up on the other,
idle vCPU and ~recvmsg~); GO sent to the child starting to write ~result.json~ 1.56 ms;
~wait~ (GO sent to the result seen by the daemon) 1.78 ms: the result's write, rename and
the daemon's wake-up on its inotify watch take about 0.22 ms. The child's own steps after
GO, handler included, are the rest.

Tried this round and not kept (~zygo-bench -ab~, 4 rounds of 300 at 8 clients and 300-400
one-client requests each):

- **~GOMAXPROCS=1~ again, with sysmon's setting** (twice): daemon CPU 0.81x and 0.78x (0.774
  -> 0.624 ms), system calls 93 -> 80, context switches 14.5 -> 7 a request, throughput 1.04x
  and 1.06x, but one-client p50 1.03x and 1.07x (~wait~ 1.15x and 1.10x): a system call that
  blocks (a cgroup move waiting for an RCU grace period, 6-15 ms at p90-p99) keeps the only
  P until sysmon takes it back, up to its 10 ms tick when the daemon was quiet, and the
  result of another request waits behind it.
- **No pre-warm at all** (the child does everything after GO): zygote-side faults 934 vs
  945 a request, CPU 0.97x, throughput 0.89x, one-client p50 1.43x: the pre-warm costs the
  zygote side nothing it would not pay after GO.
- **The agent's modules precompiled** (~.pyc~ made next to the sources; the zygote compiles
  them from source today, ~PYTHONDONTWRITEBYTECODE=1~, no ~__pycache__~): a probe importing
  the agent reads 18-20 ms instead of 39-52 ms and holds 1.6 MB less anonymous memory, and its
  fork + exit + wait takes 1.52 instead of 1.65 ms; A/B under load: zygote side 1.00x,
  throughput 0.99x. It would speed up zygote starts and spawn-mode cold starts by 20-30 ms,
  but the daemon may not run a manifest's interpreter outside a sandbox to compile, and the
  cache would have to be keyed by interpreter: left for an issue of its own (cold starts).
- **~favordynmods~** (a named v1 hierarchy mounted with it, which puts the threadgroup
  rwsem of every hierarchy on its slow path so a task move never waits for a grace period):
  daemon CPU 0.73-0.79 vs 0.73-0.81 ms (stats), 1.17-1.47 vs 1.30 ms (1 GiB): within noise,
  and it changes the host's fork path. Unmounted.
- **Where the zygote side's CPU goes, on this host** (~perf record -a -g~ under 8 clients):
  python3 processes 85% of all samples, 76% of theirs in the kernel: page faults 34%
  (copy-on-write ~do_wp_page~ 20%), ~exit_mmap~ 17%, fork's ~dup_mmap~ 10%. Per child
  (~exceptions:page_fault_user~, classified by the zygote's mappings) 910 faults against the
  ideal child's 571: writes to anonymous memory (obmalloc's arenas) 511 vs 289, ~[heap]~ 100
  vs 54, libpython's data 100 vs 73, file-backed reads and executes about 170 in both. The
  zygote holds 19.4 MB of anonymous memory against the ideal server's 16.0 MB.

### Eleventh round (lead): the event in go, and four ideas measured and dropped

- **The event in the go datagram** (docs/protocol.md step 4, ~maxInlineEvent~): a function's
  event of at most 32 KiB to a Python agent travels after go's JSON and a newline instead of
  as ~event.json~, which spares the daemon its create, write, fchown, close and removal and
  the child its open and read. A/B against the tree before it (~zygo-bench -ab -ab-perf~, 2
  rounds of 300 at 8 clients, 300 one-client requests):

| per warm stats request | A (9cdc6f8) | B (inline event) | B/A |
|---|---|---|---|
| daemon system calls (perf stat, two rounds) | 91.4, 90.8 | 88.2, 85.0 | 0.95 |
| daemon CPU, 8 clients | 0.749 ms | 0.633 ms | 0.85 |
| zygote side system calls / children's faults | 99.5-99.8 / 902 | 95.8-95.9 / 890 | 0.96 / 0.99 |
| zygote side CPU, 8 clients | 5.499 ms | 5.099 ms | 0.93 |
| throughput, 8 clients | 297.6 req/s | 320.6 req/s | 1.08 |
| p50 / p90, 1 client | 3.174 / 7.591 ms | 3.012 / 6.427 ms | 0.95 / 0.85 |
| dir / child.event | 0.041 / 0.045 ms | 0.002 / 0.014 ms | |

- **A request's Landlock rules added from C** (a ~zygo_landlock_add~ in zygo_rand.so taking
  the rules packed once in the zygote, one ctypes call a child instead of an open, a ctypes
  ~landlock_add_rule~ and a close per rule from Python): the same 17 rules in a forked child of
  a NumPy process cost 0.29-0.40 ms and 75 faults from C against 0.32-0.38 ms and 84 faults
  from Python (a warm C loop makes the ruleset in 0.05 ms: what a child pays is the first use
  of the calls' pages after the fork, not Python's per-rule work); A/B of the whole request:
  ~child.pre.rehearse~ 0.694 -> 0.689 ms, and ~child.landlock~ 0.090 -> 0.206 ms (the
  request's own rule packed per request). Not kept.
- **The zygote's allocator pools filled before the freeze** (every free block of every
  partly used obmalloc pool taken, read from ~sys._debugmallocstats()~, so that a child's
  allocations land on pages the zygote never touched): a probe of the stats handler forked
  300 times, faults per child 484/494 -> 473/470, CPU within the host's noise. Not kept.
- **~malloc_trim(0)~ before the freeze** (again: the eighth round found nothing to return):
  it gives back 0.37 of the probe zygote's 18.8 MB of anonymous memory, and a child's faults
  read 505 -> 499-501. Not kept.
- **The zygote's mappings**: a NumPy process forking and reaping 300 children with 177 and
  with 218 mappings (ssl, ctypes, hashlib, socket, uuid, tempfile imported): child CPU
  0.95-1.17 against 1.03-1.30 ms, within the noise between runs.
- **The floor both servers pay on this host**: a NumPy interpreter's bare ~fork~ and ~_exit~
  costs the child 241 faults and 1.0-1.3 ms of CPU and the parent 0.4-0.6 ms; the stats
  handler with a reseed and a JSON answer on top, 484-506 faults and 2.4-2.7 ms.

### Twelfth round (lead): a child forked for a waiting request skips its pre-warm

- **Who waits for a fork.** The bench now counts the requests whose child was forked for
  them (~X-Zygo-Child: forked~: the pool was empty) rather than taken from the pool: at 8
  clients 86-88% of them, at one client back to back 11-15% (the refill, a fork and a
  pre-warm at nice +4, is not always done before the next request). So under load almost
  every child ran its pre-warm (~child.pre.*~: 1.2-1.4 ms of descriptors, reseed and
  rehearsal) while its request waited for the ~hello~ that follows it, and then ran every one
  of those steps again after GO.
- **No pre-warm at all**, measured first (a tree whose children never pre-warm, ~-ab~ 2
  rounds of 300): zygote side 0.93x, throughput 1.05x, but one-client p50 1.59x (~wait~ 1.86x:
  the first use's faults move after GO for pooled children too). Not kept.
- **~hurry~** (docs/protocol.md steps 1 and 3): a request that finds the pool empty queues
  ~{"type":"hurry"}~ on the request socket before the zygote has the child's end; the child
  reads its socket once without waiting before ~hello~ and, finding it, skips the reseed and
  the rehearsal of its pre-warm (GO's steps do them; ~TestPreForkedChildrenStayIndependent~
  checks that such a child reports no ~child.pre.reseed~ or ~child.pre.rehearse~, a
  ~child.reseed~, its own Landlock domain, and differs in every random row; agent
  ~HurryTest~). A child forked to refill the pool pre-warms as before. The measurement below
  is of the first version, which skipped the descriptors and shared memory too; a review
  found that those then ran after GO inside the request's cgroup, charged to its
  ~memory_mib~ and ~cpu_ms~ (an import with a 96 MiB shared mapping failed at 64 MiB only
  when the pool was empty), so they run before ~hello~ again: they ran once a child either
  way, so the CPU is unchanged. A/B against
  the tree before it (~zygo-bench -ab~, 8 rounds of 600 at 8 clients, 300 one-client
  requests; a slow spell of the host, about 250-300 req/s):

| per warm stats request | A (f15dc5a) | B (hurry) | B/A |
|---|---|---|---|
| zygote side CPU, 8 clients | 6.612 ms | 6.264 ms | 0.95 |
| daemon CPU, 8 clients | 0.779 ms | 0.781 ms | 1.00 |
| throughput, 8 clients | 252.0 req/s | 265.2 req/s | 1.05 |
| p50 / p90, 1 client | 3.642 / 8.782 ms | 3.577 / 7.665 ms | 0.98 / 0.87 |
| zygote side system calls (perf stat, 4 rounds of 300) | 95.7-95.9 | 88.9-89.1 | 0.93 |
| children's minor faults (same rounds) | 905 | 895 | 0.99 |

  Three shorter runs before it (2-4 rounds of 300) read throughput 1.11x, 1.01x and 0.89x
  and zygote side 0.89x, 0.98x and 1.13x: rounds of a second or two move by 20% on this host,
  so the long run is the one to read. The median ~wait~ of the one-client series reads
  1.09-1.16x in every run while p50 reads 0.98-1.03x: the one-client requests that find the
  pool empty (11-15%) now pay the first use's faults after GO, where before they paid the
  whole pre-warm before ~hello~.
- **A pool request's event in go too**: the pools' requests now carry an event of at most
  32 KiB in the go datagram, as functions' do (~TestPoolEventInlineOrByFile~).
- **The request socket made non-blocking at its creation** (~SOCK_NONBLOCK~, the child's end
  sent as a bare descriptor; the child sets its end blocking, as it did): one ~fcntl~ where
  there were three (~F_SETFL~ on ours, ~os.NewFile~'s ~F_GETFL~ on each). A/B against the tree
  before it (4 rounds of 500 at 8 clients): daemon system calls 90.1-91.7 -> 87.5-89.4 a
  request, daemon CPU 0.96x, throughput 1.05x, one-client p50 0.96x.
- **What a child copies, page by page** (a probe function run by the agent tests' harness,
  outside bwrap; at its handler's entry the harness, as root, compares each writable page of
  the child with the zygote's: a page whose frame differs is a copy-on-write copy, and
  ~/proc/PID/mem~ of both gives the 8-byte words that differ; the handler then maps each word
  to the object holding it, with ~gc.unfreeze()~ so that ~gc.get_objects()~ lists the frozen
  ones): about 610 pages copied by the handler's entry, 4,200 words changed. The first write
  on each page: a ~str~'s reference count 74 pages, a code object's ~co_warmup~ counter 58
  (CPython 3.11 counts the calls of every code object up to its quickening, and the zygote
  never runs the request path), the interpreter's own static data 34 (~python3.11~'s ~.data~
  and ~.bss~), malloc's heap 28, an object the walk does not reach 106 (obmalloc's free blocks
  and pool headers, dict key tables, list arrays), the rest a few pages each (reference counts
  of functions, types, dicts; the ~MT19937~ and ~Random~ states the reseed writes on
  purpose). No single cause is a large share.
- **Tried and not kept: the agent's code left unquickened.** Setting ~co_warmup~ to 0 in the
  zygote for the agent's 213 code objects (so ~RESUME~ never counts or quickens them; a probe
  of the field's place first) took the child's code-object writes from 158 words to 38 and
  its copied pages at the handler's entry from 614 to 597; but side by side (~-ab -ab-perf~,
  6 rounds of 500) the children's minor faults rose from 904.5 to 910.6 a request and the
  zygote's from 44 to 51 (unspecialised bytecode runs the interpreter's generic paths: other
  pages of its code, the cheap kind of fault), zygote side CPU 1.05x, throughput 0.95x, p50
  0.94x: no gain to set against relying on CPython 3.11's layout. Removed.
- **The bench's own client.** Its CPU per request, measured beside the servers' in the same
  rounds: 0.29-0.35 ms for a Zygo request (Go's HTTP client) against 0.09 ms for the ideal
  server's line protocol, on the same 2 cores: about 0.2 ms of each Zygo request's share of
  the machine is the HTTP client's, which the throughput ratio counts against Zygo.
- **Targets 1 and 2 are now read side by side.** The ideal step runs the one-client series
  in blocks of 20 back-to-back requests alternating with Zygo's warm stats, and the 8-client
  series in 4 rounds alternating which goes first, so a change of the host's speed within
  minutes moves both sides (before, the ideal ran after warm's own series, a minute or more
  later). warm's own rows stay as they were.
- **What the daemon's system calls are now** (~strace -c -f~ of the daemon over 545 requests
  at 8 clients; each row per request): ~epoll_pwait~ 9.2, ~pwrite64~ 8.9 (the four
  ~cgroup.procs~ moves, ~cpuacct.usage~ and ~memory.max_usage_in_bytes~, and SQLite's WAL 2.4),
  ~pread64~ 7.4 (seven cgroup counters read after the request), ~close~ 7.0, ~read~ 6.6 (2.3 of
  them ~EAGAIN~), ~unlinkat~ 5.0, ~recvmsg~ 5.0 (2.0 ~EAGAIN~), ~openat2~ 4.0, ~fcntl~ 4.0,
  ~nanosleep~ 3.6 and ~futex~ 3.5 (the Go scheduler), ~fstat~ 3.0, ~sendmsg~ 2.9, ~epoll_ctl~
  2.0, ~mkdirat~ 2.0, then one each of ~write~, ~socketpair~, ~inotify_add_watch~,
  ~pidfd_open~, ~getdents64~, ~setpriority~, ~getpriority~, ~fchownat~, ~fchmod~,
  ~setsockopt~: about 84. The daemon's Go profile over 4,000 requests (~-cpuprofile~): 57% of
  its CPU is in system calls, the cgroup writes and reads 12-15%, the scheduler's
  ~findRunnable~ 18%, the result's JSON decode 4%, the socket pair's creation and close 8%.
  None of these is a large share alone; point 3's 0.5 ms needs several of them cut, or fewer
  hand-offs between goroutines per request (each one a wake-up: ~epoll_pwait~, ~futex~).

### Thirteenth round (lead): what a hurried child's steps cost, OpenSSL's own reseed, the bench's client

- **Where the zygote side's CPU goes, beside the ideal server's** (~perf record -g~ of the
  stats zygote and of the ideal server, each with every child it forks, over the same
  ~-only ideal~ step: 1,200 requests each, one-client blocks and 8-client rounds alternating).
  Zygo's tree took 1.88x the ideal's samples (38,508 against 20,467): its children's page
  faults 17,349 against 9,064; its children's user space 9,701 against 3,705 (the
  interpreter's own code, both trees: 7,640 against 3,152); the zygote's forks 6,505 against
  the server's 4,295 (the zygote maps 224 areas and 19.4 MB of anonymous memory, the ideal
  server 175 and 15.8 MB: the agent's modules, ~ssl~, ~ctypes~, ~uuid~); the children's
  system calls about 2,600 against 470; the zygote's own faults 830 against the server's
  1,412. The daemon's Go profile over the same run: 44% of its CPU in system calls, the
  scheduler (~findRunnable~, ~park_m~, wake-ups) 23%, net/http outside the handler 11%, the
  cgroup moves 7%, the result's read and JSON decode 7%.
- **A hurried child, step by step** (a probe: the agent tests' harness outside bwrap with the
  request directories on a tmpfs, the agent's step timer reading ~getrusage~ instead of the
  clock; 200 hurried stats requests; CPU and minor faults a request): from the fork to the
  child's first line 1.06 ms and 284 faults (the interpreter's after-fork work; the ideal
  child pays it too), ~pre.fdreset~ 0.46 ms and 90 (the first Python code after the fork:
  a build without the step moved its faults to the next one), ~hello~ and ~go~ 0.36 ms and
  72, ~stdio~ 0.22 and 37, the reseed 0.70 and 130 (~random~ 0.08/17, NumPy 0.26/43,
  OpenSSL 0.17/34, ~uuid1~ 0.03/7, generator objects 0.07/12), ~tmpdir~ 0.12 and 20,
  ~dumpable~ 0.06 and 12, ~landlock~ 0.24 and 36, the event 0.09 and 10, the handler 0.94 and
  157, the result's encode and flush 0.09 and 10, the result's write and the exit 1.9-2.0 ms:
  893 faults and 6.4 ms in all. Upper bounds, the same harness in interleaved blocks with
  steps removed (not a design, a measurement): without the descriptors, stdio, ~TMPDIR~,
  ~dumpable~ and Landlock steps 875 -> 786 faults and 7.00 -> 5.94 ms (0.85x); Landlock
  alone 0.94x, stdio with ~TMPDIR~ and ~dumpable~ 0.95x, the descriptors alone 1.00x.
- **A forked child no longer adds OS bytes to OpenSSL** (ee87289; docs/protocol.md rule 7,
  docs/fork-safety.md): OpenSSL 1.1.1d and later keeps the process id its generators were
  seeded in and reseeds them from the kernel at their first use in a process with another
  id (the fix of CVE-2019-1549), so the agent's ~ssl.RAND_add~ in every child only made it
  reseed early, whether the request drew from OpenSSL or not. A forked child now skips the
  hook for such an OpenSSL (not for older ones, the 3.0.0 development releases or LibreSSL;
  the ~libcrypto~ warm-up check says which); a restore keeps its process id, so the
  sandboxes' reseal still runs it. Tests: agent ~test_BH04_openssl_reseeds_itself_after_fork~
  (a function counting ~ssl.RAND_add~: none in pre-warmed and hurried children, and
  ~RAND_bytes~ distinct in every one; it fails when the hook runs), the verdict table in
  ~test_units~, ~reseed_all(skip=)~ in ~test_reseedcore~. A/B against ee0c685 (4 rounds of
  500 at 8 clients, 300 one-client requests): children's faults 902.8 -> 865.7 a request,
  zygote side 0.97x, ~child.reseed~ 0.212 -> 0.176 ms, one-client p50 0.89x, throughput 1.09x
  (the host sped up in the second half; read the zygote side).
- **The bench's client** (ad70524): the warm series now send their invokes over persistent
  HTTP/1.1 connections, one a client, with the request's bytes made once and the answer read
  by net/http's ~ReadResponse~ (~invokeConn~, internal/bench/httpconn.go), as the ideal
  server's series use one line-protocol connection a client; the SDK's client ran a
  goroutine a request and two a connection. The pool row's function figure stays on the SDK,
  like the pool's runs it is compared with. Two runs of each bench binary, alternating: the
  client's CPU 0.39-0.42 -> 0.26-0.27 ms a request (0.16-0.26 ms in this round's later ~-ab~
  runs, against 0.10-0.17 ms for the line protocol); the throughput ratio read 0.55 and 0.56
  with the old client, 0.58 and 0.56 with the new one.
- **Tried and not kept:**
  - *The request's Landlock rules added in C* (a6162ed, 0e3767f, reverted): the rules every
    domain holds packed once in the zygote and added by one call into the preloaded guard,
    the request's own directory by another. Side by side (4 rounds of 500): children's
    faults 868 -> 864, zygote side 1.01x, throughput 1.00x, p50 0.96x. The domain's cost is
    the kernel's (the paths' opens and the rules), not the Python calls around it.
  - *The zygote's stdio flushed once per entry into the C loop* (every later fork flushing
    C's streams only, no Python run between forks): the zygote's own faults 45 -> 13.6 a
    request, but its children's 896 -> 906 (the pages the zygote no longer writes stay
    shared, and each child copies them instead), zygote side 1.00x, throughput 1.00x.
  - *The child's text streams made once in the zygote* (over descriptors 1 and 2 while they
    pointed at ~/dev/null~, so that they read as seekable; a child would only have pointed 1
    and 2 at its files): the probe above, 16 interleaved blocks of 40 hurried requests,
    children's faults 853.9 -> 853.8 and CPU 7.03 -> 7.00 ms a request. What ~stdio~ costs is
    the files' opens and the first use of the pages, not the objects. Not made.
  - *~GOMAXPROCS=1~ for the daemon*, a third time (4 rounds of 500, the guard beside both
    builds): daemon CPU 0.85x, system calls 86.4 -> 75.7 and context switches 15.3 -> 7.5 a
    request, zygote side 1.02x, throughput 1.00x, one-client p50 1.05x and p90 1.03x, as in
    the ninth round: one P serialises the daemon's goroutines behind each other on the
    request path. A first run of it had no guard beside either build (the zygotes' loop in
    Python): 0.85x, 1.04x and 1.04x.
- **Every warm figure is read through one client now**: the warm series, the one-client
  blocks and 8-client rounds beside the ideal server, the cold step's cold and warm requests
  and ~-ab~'s series all use ~invokeConn~; only the pool row's function figure uses the SDK,
  as the pool's runs it is compared with do.

### Fourteenth round (lead): the interpreter's code and the zygote's heap on huge pages

- **Where the zygote side's time goes, a child at a time** (~perf record -a -g~, 6 s of each
  server alone at 8 clients, the python3 processes' samples classified by call chain and
  divided by the children seen; about 3,400 samples a second a CPU): Zygo's page faults
  14.1, exit 8.4, user space 7.0, fork 4.3, other system calls 2.3 (36.2 a child); the ideal
  server's 8.2, 4.2, 2.7, 2.4 and 0.6 (18.1). The exit is ~exit_mmap~'s unmapping; the fork
  is ~copy_page_range~, 2.2x the ideal's a child for about as many entries copied
  (~vm_normal_page~, called once an entry, 0.22 against 0.23 samples a child). A child at its
  handler holds 2.96 MB of pages it copied against the ideal child's 1.9 MB (about 740
  against 475 pages; ~smaps_rollup~ from inside the handler); the interpreter's own code
  runs 5.2 samples a Zygo child against 2.0 an ideal one.
- **The interpreter's code on huge pages by default** (f4570aa; agents/python/zygo_agent/
  hugetext.py): the eighth round's move, opt-in since then, now runs in every fork-mode
  Python zygote while what its sandbox holds plus 2 MiB a range stays within half of its
  ~zygote_memory_mib~ (the daemon passes it as ~--memory-mib~; the budget as reviewed, below);
  a function sized close to its limit (~TestZygoteKilledByLimitIsRestarted~: 40 MiB held
  under 64) is left as it was; ~zygo serve --no-huge-pages~ turns it off. Side by side with the tree before it (~-ab~, 4 rounds of 500 at 8 clients, 300
  one-client requests): zygote side 0.88x, throughput 1.11x, children's faults 880 -> 818 a
  request, one-client p50 0.94x. Test: ~TestInterpreterCodeOnHugePagesWithinTheZygoteLimit~
  (test/e2e: a request's child sees its zygote's code on huge pages, and not when the zygote
  holds more than half its limit), the agent's ~test_hugetext~.
- **The zygote's heap and arenas on huge pages** (01908a0): after the code, each 2 MiB-aligned
  range wholly inside a private writable anonymous mapping is collapsed in place
  (~MADV_COLLAPSE~), within the same budget: 3-5 ranges of a NumPy zygote; ~fork~
  copies one entry for each, and a child reads them without the hypervisor's per-page cost;
  a child's first write splits its own mapping of the range, and the zygote's writes after a
  fork split its own for good (3 of the 5 still whole at rest). Side by side: zygote side
  0.95x (4 rounds of 500), 0.97x (6 rounds of 500) and 0.91x (16 rounds of 300: the rounds'
  ratios 0.92 +- 0.09), one-client p90 0.87x and 0.72x, children's faults 808-815 -> 819-832
  (the splits), the zygote's resident memory +0.4 MiB.
- **A review's findings, fixed before the round's last runs** (a helper given the change to
  break): the first budget counted the zygote's own ~VmRSS~ only, while ~zygote_memory_mib~
  bounds its whole cgroup: a function whose import started helpers (two of 17 MiB and 8 MiB
  held, limit 64) deployed before and then had its zygote killed by the limit ten times in
  9 s, and collapsing filled sparse anonymous memory (a 512 MiB ~np.zeros~ with 2,000 entries
  set: 34 -> 492 MiB). Now the budget is what the sandbox holds (~VmRSS~ + ~VmPTE~ of every
  process it sees, the agent being PID 1 of its pid namespace, and its tmpfs mounts'
  contents), a heap range is collapsed only with 448 of its 512 pages in memory (~mincore~)
  and charged the pages it adds, ~--memory-mib~ is passed without cgroups too, and the off
  switch is ~zygo serve --no-huge-pages~ (the agent's environment, which the import could
  set, is no longer read). Tests: ~TestInterpreterCodeOnHugePagesWithinTheZygoteLimit~ (a
  helper holding 40 MiB under 96: nothing taken; a 256 MiB sparse mapping: not filled; the
  flag), agent ~ChooseTest~, ~HeapRangesTest~, ~test_a_sparse_mapping_is_left_alone~; each
  fails with its fix removed. A second review found the density check fooled by the kernel's
  zero page (a sparse table read once looks full to ~mincore~: 39 ranges collapsed, the
  zygote killed by its 96 MiB limit at every fork) and memory no ~VmRSS~ shows (a 44 MiB
  memfd under 64 MiB): a range's density is now also its mapping's private pages from
  ~smaps~, the heap's collapses stop once the zygote's ~RssAnon~ has grown by the budget,
  and the budget counts this process's memfds and the sandbox's System V segments; both
  cases are tests (~hugesparse~ reads its table, ~test_memfds_and_system_v_segments_count~).
  Not foreseen, and documented: a helper's own memfds, and what a helper allocates after
  ~ready~ (a function running within a few MiB of its limit needs ~--no-huge-pages~).
- **What the huge pages cost in memory** (~make bench~'s PSS rows, the thirteenth round's
  final run against this round's 17:22, 17:57 and 18:18 ones): a NumPy zygote at rest 11.5
  -> 11.9-12.0 MiB, an idle pool of two children 17.4 -> 19.1-19.2 MiB, a child mid-request
  7.4 -> 8.0 MiB, and 100 function zygotes 2323 -> 2738-2756 MiB (+4.2 MiB each: the interpreter's 4 MiB of code are now private to each
  zygote, where the file's pages were shared by every process that maps them). The
  half-of-~zygote_memory_mib~ rule bounds it per zygote; nothing bounds it per host but the
  number of functions.
- **How much a side-by-side run can tell.** Two builds that did the same thing (a bug left
  B's extra step without effect) read zygote side 0.93x and throughput 1.09x over 6 rounds of
  500; single rounds move by 10-15%. The figures above say how many rounds each comes from;
  the 16-round runs give the mean of the rounds' ratios and its spread.
- **Tried and not kept:**
  - *More code on huge pages*: NumPy's ~_multiarray_umath~ and ~libcrypto~ too (the ranges the
    zygote had used): 1.04x the zygote side of the interpreter's alone (~libcrypto~ is the
    agent's set-up's, seldom a request's; a huge page costs every fork and exit a page table
    whether the child runs it or not, where a file mapping no child touches costs ~fork~
    nothing). NumPy's alone: 0.90x and 0.94x in 6-round runs, 0.98x (0.99 +- 0.03) in a
    16-round one, children's faults 821 -> 789, for 4 MiB more a zygote. (Which ranges a
    zygote used is read from its own ~smaps~: a non-dumpable process may not open its
    ~pagemap~.)
  - *The request's Landlock ruleset made by the zygote* (in C, right before each fork, for
    that child alone, from O_PATH handles the zygote keeps in a block the child closes first;
    the zygote closing its copy after the fork): system calls 87.8 -> 71.9 a request,
    children's faults 836 -> 816, but zygote side 1.01x and throughput 0.99x: the pre-warmed
    child's ~child.landlock~ went 0.10 -> 0.17 ms (its first use of the Landlock calls moved
    after GO), as in the eleventh and thirteenth rounds.
  - *The object allocator's arenas in one region* (~PyObject_SetArenaAllocator~ from the
    preloaded guard's constructor, 1 MiB arenas carved in address order out of a reserved
    2 MiB-aligned region, so that they too lie in collapsible ranges): 7 ranges collapsed
    instead of 5, zygote side 0.96x (0.96 +- 0.02) and 0.99x (0.99 +- 0.03) in two 16-round
    runs: not worth an allocator of our own in every zygote.
  - *The child's text streams made in the zygote*: already measured in the thirteenth round;
    not made again.

### Fifteenth round (lead): a new host, and what the daemon's half-millisecond would take

This session's host is another of the kind (Linux 6.18.44-fc-v1252, 2 cores, a Firecracker
guest under PVM) and forks far more slowly than the fourteenth round's: the ideal server's
one-client p50 18.8-22.1 ms (4.4 ms there), its CPU 29.6-37.8 ms a request (5.2 ms), Zygo's
warm stats p50 14.9-18.1 ms (this session's ~-only ideal~ run and the table above). Its kernel also differs in one way the tests met: a read of an untouched
anonymous page gets a page of its own, not the shared zero page (an 8 MiB mapping read whole:
~Rss~ and ~Private_Dirty~ 8192 kB), so a sparse table read once is memory by itself here.

- **The daemon's system calls, counted again** (~perf trace -s -p~ of the daemon, 500 warm
  stats requests at 8 clients, the stats function alone): 101 a request: ~epoll_pwait~ 16.4,
  ~pwrite64~ 11.6 (the child's four ~cgroup.procs~, ~cpuacct.usage~ and
  ~memory.max_usage_in_bytes~ resets, SQLite's WAL frames), ~read~ 7.6, ~futex~ 7.3, ~pread64~
  7.2 (the released group's counters), ~close~ 7.0, ~recvmsg~ 5.4, ~unlinkat~ 5.0 (the request
  directory), ~nanosleep~ 4.7, ~fcntl~ 4.0 (SQLite's locks), ~openat2~ 4.0 (the request
  directory, ~result.json~, ~stdout~, ~stderr~), ~fstat~ 3.0, ~sendmsg~ 2.9, ~mkdirat~ 2.0 and
  one each of ~inotify_add_watch~, ~socketpair~, ~pidfd_open~, ~getdents64~, ~fchownat~,
  ~getpriority~, ~setpriority~, ~fchmod~, ~setsockopt~; 20 context switches. ~perf record -g~
  of the daemon: 48% of its samples in the kernel (~pwrite64~ 8%, ~epoll_pwait~ 7%,
  ~schedule~ 11%), the rest the Go runtime's scheduler and allocator, ~net/http~, JSON and
  SQLite in shares of 2-9% each. Each of these was cut in an earlier round; what is left is
  one or two system calls for each guarantee of the request path (a cgroup per request in
  four v1 hierarchies, its counters read at the end, a request directory made and removed by
  descriptor, the result and output read as regular files, the logs stored). A syscall's
  entry costs about 1 us here (~getppid~ in a loop), a cgroup counter's ~pread~ 1.5 us, an
  ~open~ and ~close~ 3.4 us; under load the daemon pays about 15 us of CPU a system call
  with its share of hand-offs. 0.5 ms is about 35 of them.
- **One P for the daemon** (~GOMAXPROCS=1~ in the daemon's environment, the same build;
  ~-ab~, 10 rounds of 300 at 8 clients, 200 one-client requests): daemon CPU 0.915x (the
  rounds' ratios 0.92 +- 0.05; 1.79 -> 1.64 ms), its system calls 97.5 -> 85.0 and context
  switches 20.3 -> 10.9 a request (no spinning thread looking for work), zygote side 1.01x,
  throughput 1.00x, one-client p50 1.02x and p90 1.05x. Not kept: one P caps the daemon at
  one core, which a host with many cores and cheap requests would reach (at 1 ms a request,
  about 1,000 requests a second), for 8% here.
- **Where a child's page faults fall on this host** (a build whose step timer counted
  ~ru_minflt~, 60 one-client requests paced 50 ms apart, medians; the ninth round did the same
  on its host): 226 before the child's Python code runs again (the fork loop's return,
  ~PyOS_AfterFork_Child~ and the at-fork hooks), 82 more before the pre-warm (closing the
  zygote's descriptors, the request socket's object, the ~hurry~ check), the pre-warm 312
  (descriptors 33, shared memory 8, reseed 125, rehearsal 146), every step after GO 35 and
  the handler 150: 830 by the result's write. The ideal server's child, counted the same way,
  has 714 by its result. What a fork costs any Python child, measured apart (~os.fork~ in a
  loop, the count at the child's first line): 150 with nothing imported, 247 with
  ~threading~ imported (its at-fork hook runs Python code, and the first Python code a child
  runs copies the pages of the frames, dicts and types it touches), 295 with NumPy; a raw
  ~fork(2)~ through ctypes, with no at-fork work, 124-129 whatever is imported. Zygo's child
  has 116 faults (16%) more than the ideal's, which no step-by-step count places (the
  rehearsal pays before GO what the later steps would); on this host a fault costs enough
  that the zygote side is 1.34x the ideal's CPU (39.7 against 29.6 ms, the session's first
  ~-only ideal~ run; 1.37x in the table above) for 1.16x its faults.
- **Tests that held only on the hosts they were written on** (this host failed three on its
  first run): the Landlock probe's new file in ~/tmp~ passed only where an earlier run had
  left that name (its request root was beneath ~/tmp~, which splits ~/tmp~'s rule into its
  entries; a sandbox's ~/run/zygo/req~ is not); the sparse-table tests assumed the zero page
  (now: the written-only table is never collapsed; the read-whole one is checked where the
  kernel maps the zero page and skipped, saying so, where it does not; what it guards, the
  density read from ~smaps~ and not ~mincore~ alone, is checked on every host by a dense
  mapping shared copy-on-write with the parent, all resident to ~mincore~ and none of it the
  child's own; the e2e cases, a table read whole and one never read, compare the child's
  anonymous memory with the same function under ~--no-huge-pages~, and the never-read one
  fails here with the density check removed: 278,008 against 12,104 KiB); and
  ~TestScratchIsBounded~ waited for the earlier requests' directories by their contents, which
  a directory still being removed can look like (tmpfs lists newest first, so ~tmp/~ goes
  last): its holder now keeps taking every inode freed after the fill, and the request is
  sent once the host's ~statfs~ has shown none free for 200 ms. The cgroup tests started
  ~python3~ from PATH, here a pyenv shim that spent about 0.5 s of CPU inside the group before
  the interpreter ran, past ~TestHeldGroupCountsCPUFromBegin~'s 600 ms limit: they run
  ~/usr/bin/python3~ now, as the agent's tests do.
`

// boundsText explains, for the targets of the performance issue, what
// bounds the figures; the profile row above is its evidence.
const boundsText = `
## What bounds the targets

- **This run's host.** This table (21:39 on 2026-12-03, the fourteenth round's code with the
  fifteenth round's test fixes; the figures in this bullet are the 20:29 run's, and this
  table's are in brackets; nothing else of ours running) is from a new host of the kind
  (Linux 6.18.44-fc-v1252) that forks and faults far more slowly than the fourteenth round's:
  the fork floor 8.75 ms (2.48 ms there), the ideal server 37.8 ms of CPU a request (5.2 ms)
  and 51 req/s at 8 clients (340), a warm hello 11.3 ms (2.9 ms). Its kernel runs DAMON on
  physical memory (~kdamond~, ~paddr~; set up by the host, not by us), and a read of an
  untouched anonymous page gets a page of its own rather than the zero page (fifteenth round).
  Met: **warm p50 / ideal 0.81x** [0.88x], **8-client throughput / ideal 0.70x** [0.65x], Node
  0.3x [0.2x], the pool row 1.30x [1.32x: not met]. Not met: **the daemon's CPU, 2.17 ms** [2.00 ms] (1.4-2.2 ms on this host;
  5.7% of the ideal's CPU a request, where the fourteenth round's 0.99 ms was 19%), and
  **cold/warm 18.9x** [15.4x]: a cold start costs about what it did (357 against 267 ms) while every
  warm request pays this host's fork, 4x the fourteenth round's (the ideal fork-per-request
  server's own p50, 22.1 ms, would read 16x). Zygo's daemon and zygote side against the
  ideal's CPU: 1.43x [1.41x] (1.56x in the fourteenth round's final run). The targets stated in
  milliseconds or against a cold start (3 and 4) move with the host's fork and system-call
  costs; those read side by side with the ideal server (1 and 2) held on both hosts. The
  daemon's CPU grows with the time between requests (2.92 ms paced to 25 req/s), not with
  the zygote's size up to 256 MiB or with the number of functions (the tenth round).
- **The request's Landlock domain since the tenth round's security fix** (it now handles
  reading files and every change to the filesystem, and is entered after GO; docs/security.md):
  A/B against the tree before it (~-ab~, 2 rounds of 300 at 8 clients and 300 one-client
  requests, a host with other work on it): ~child.landlock~ 0.013 -> 0.085 ms (the request's
  own rule and ~landlock_restrict_self~), ~child.pre.rehearse~ 0.695 -> 0.770 ms (the ruleset's
  17 rules made before ~hello~) and ~child.pre.landlock~ 0.151 -> 0 (nothing entered ahead);
  throughput 1.02x, one-client p50 0.91x, daemon CPU 1.02x, zygote side 0.97x: within noise.
- **Pools on this host.** The pool row read 1.54x, 1.18x and 1.69x the function's p50 in the
  tenth round's three runs, 1.41x and 1.73x in the eleventh's, 1.04x, 1.43x and 1.59x in
  the twelfth's, 1.19x, 1.39x, 1.45x and 1.39x in the thirteenth's and 1.62x in the
  fourteenth's runs at 17:22, 17:57 and 18:18, 1.51x in its final one (two ~-only pools~ runs of each tree, alternating: 1.42x and 1.47x
  before the huge pages, 1.49x and 1.13x after, the pool's p50 5.18 and 5.10 against 4.55
  and 4.28 ms) (target 1.3x; pools' events
  travel in go since the twelfth; both sides of the row use the SDK's client);
  the same step run twice with each binary, alternating, gave 1.48x and 1.50x for the tree
  before this round's security changes and 1.38x and 1.67x for this one: the pool's ratio on
  this host is 1.2-1.7x either way (1.09-1.39x in earlier runs on other hosts), not a cost of
  the change. Not investigated further.
- **Warm p50 at or below the fork floor.** The fork is off the request path: children are
  forked ahead of demand and pre-warmed (the profile's fork+hello is a pool take, about
  0.01 ms). With a zygote of 256 MiB or more Zygo is at or below the floor, because the floor's
  fork cost grows with resident memory and Zygo's does not. For a small zygote the floor (a bare
  fork + exit + wait, about 1-2 ms here) is below Zygo's warm p50, and the profile shows what is
  left, all of it per-request isolation done on purpose after the request is known: the request
  directory and event file (dir), the secret files and the cgroup's CPU count (before_go), and in the
  child after GO the reseed, stdio redirection, TMPDIR and the handler itself, whose first
  writes take copy-on-write faults (run); then the HTTP round trip and JSON outside the
  daemon's phases. Request directories are made ahead of demand with the pool, and a
  pre-forked child waits in its request cgroup (before_go is the secret files and a counter
  reset); next step, not done: skip the HTTP layer for in-process callers.
- **Cold/warm of at least 50x for the NumPy example.** A cold start here (bwrap + interpreter +
  NumPy import + the handler) is about 160-235 ms, so 50x needs a warm p50 of 3.2-4.7 ms; the
  warm p50 measured beside the cold starts is 3.55 ms here (2.40 ms at the eleventh round's
  fast 10:35), of which the child's own steps after GO are about 1.1 ms, and GO to the
  result seen (wait) about 2 ms: the rest of wait is the child's
  wake-up, the result file and the daemon's wake-up on its inotify watch. Read side by side
  since this round (each cold request between blocks of 20 warm ones), the ratio no longer
  depends on which minutes each series met.
- **Node.** A worker serves one request and a replacement takes about one cold start, so warm
  figures need traffic that leaves the pool time to refill (the warm series is paced); under
  back-to-back traffic a pool of 2 falls back to cold starts. A larger pool_size trades memory
  (the idle pool's PSS is reported above) for that. A ready worker already waits in its
  request cgroup, has read a first message and compiled its steps, and the answer no longer
  waits for the worker's and bubblewrap's exit (its fds 1 and 2 are the request's files); the
  replacement starts after the answer while another worker is ready. What is left is the
  worker's own steps after go (Node's first runs of its code after the idle wait), the
  delivery of go to an idle process, and the HTTP round trip.
`
