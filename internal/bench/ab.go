package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// ABConfig says what RunAB compares: two zygo binaries (each with the
// agents it embeds and the zygo_rand.so beside it), the same function on
// each, requests alternating between them so that both see the same load
// on a shared machine.
type ABConfig struct {
	Root string // the repository root (examples/ lives there)
	A, B string // the two zygo binaries
	// Function is the example directory deployed on both (default stats).
	Function string
	// Rounds of the 8-client series, A then B, then B then A, ... (default 4;
	// negative: none); each is N8 requests per daemon (default 300).
	Rounds, N8 int
	// Gap is a pause after each one-client request (for a function whose
	// pool must refill between requests: Node workers). It follows every
	// request, not each pair, so that what one daemon does after its answer
	// (a Node worker's replacement starting) does not run beside the other
	// daemon's request.
	Gap time.Duration
	// N1 requests per daemon at one client, alternating one by one
	// (A B B A ...; default 200).
	N1 int
	// CPUProfile, if set, is where B's daemon writes its Go CPU profile.
	CPUProfile string
	// Perf, if set, counts system calls, page faults and context switches
	// per request of each 8-client round with `perf stat` (the daemon; the
	// zygote with the children it forks).
	Perf     bool
	Progress io.Writer
}

// ABSide is what RunAB measured of one daemon.
type ABSide struct {
	// DaemonCPU and ZygoteCPU are CPU per request over the 8-client series
	// (/proc/PID/stat; the zygote's includes its reaped children).
	DaemonCPU, ZygoteCPU time.Duration
	Throughput           float64 // requests per second: all the 8-client rounds' requests over their wall time
	P50, P90             time.Duration
	Phases               []wire.Timing // medians of the one-client series
	// Forked8 and Forked1 are the shares (0-1) of the 8-client and the
	// one-client requests whose child was forked for them (Stats.Forked).
	Forked8, Forked1 float64
}

// RunAB starts a daemon from each binary, deploys cfg.Function on both and
// measures them side by side: CPU per request and throughput at 8 clients
// (rounds alternating which goes first), then latency at one client with
// single requests alternating.
func RunAB(ctx context.Context, cfg ABConfig) (a, b ABSide, err error) {
	if cfg.Function == "" {
		cfg.Function = "stats"
	}
	if cfg.Rounds == 0 {
		cfg.Rounds = 4
	}
	if cfg.N8 == 0 {
		cfg.N8 = 300
	}
	if cfg.N1 == 0 {
		cfg.N1 = 200
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	work, err := os.MkdirTemp("", "zygo-ab-")
	if err != nil {
		return a, b, err
	}
	defer os.RemoveAll(work)
	if err := os.Chmod(work, 0o711); err != nil {
		return a, b, err
	}
	type side struct {
		d        *benchDaemon
		pid, zyg int
		out      *ABSide
		cpu      [2]time.Duration
		rounds   []Stats
		lat      []time.Duration
		steps    [][]wire.Timing
		forked8  float64
		forked   []bool
	}
	sides := [2]*side{{out: &a}, {out: &b}}
	fn := filepath.Base(cfg.Function)
	for i, bin := range []string{cfg.A, cfg.B} {
		dc := Config{Zygo: bin}
		if i == 1 {
			dc.CPUProfile = cfg.CPUProfile
		}
		d, err := startDaemon(ctx, dc, filepath.Join(work, fmt.Sprintf("state%d", i)))
		if err != nil {
			return a, b, err
		}
		defer d.stop()
		r := &runner{ctx: ctx, c: d.client}
		if _, err := d.client.DeployDir(ctx, filepath.Join(cfg.Root, "examples", cfg.Function)); err != nil {
			return a, b, err
		}
		if _, err := InvokePaced(ctx, d.sock, fn, `{"n": 100}`, 20, 1, cfg.Gap); err != nil {
			return a, b, err
		}
		zpid := 0
		if cfg.Rounds > 0 {
			if zpid, err = r.zygotePID(fn); err != nil {
				return a, b, err
			}
		}
		sides[i].d, sides[i].pid, sides[i].zyg = d, d.cmd.Process.Pid, zpid
	}
	for r := 0; r < max(cfg.Rounds, 0); r++ {
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			s := sides[i]
			var st Stats
			f0 := faults(s.zyg)
			stopPerf := perfStat(cfg.Perf, fmt.Sprintf("round %d %s", r, "AB"[i:i+1]), s.pid, s.zyg, cfg.N8, cfg.Progress)
			cpu, err := measureCPU(cfg.N8, map[string]int{"daemon": s.pid, "zygote": s.zyg, "client": os.Getpid()}, func() error {
				var err error
				st, err = Invoke(ctx, s.d.sock, fn, `{"n": 100}`, cfg.N8, 8)
				return err
			})
			stopPerf()
			if err != nil {
				return a, b, err
			}
			if f1 := faults(s.zyg); cfg.Perf {
				fmt.Fprintf(cfg.Progress, "round %d %s minor faults per request: zygote %.1f, its children %.1f\n",
					r, "AB"[i:i+1], float64(f1[0]-f0[0])/float64(cfg.N8), float64(f1[1]-f0[1])/float64(cfg.N8))
			}
			s.cpu[0] += cpu["daemon"]
			s.cpu[1] += cpu["zygote"]
			s.rounds = append(s.rounds, st)
			s.forked8 += st.Forked
			fmt.Fprintf(cfg.Progress, "round %d %s: daemon %.3f ms, zygote side %.3f ms, bench client %.3f ms per request, %.0f req/s\n",
				r, "AB"[i:i+1], ms(cpu["daemon"]), ms(cpu["zygote"]), ms(cpu["client"]), st.Throughput)
		}
	}
	conns := make([]*invokeConn, len(sides)) // the 8-client rounds' client, one connection each
	for i, s := range sides {
		c, err := dialInvoke(ctx, s.d.sock, fn, `{"n": 100}`)
		if err != nil {
			return a, b, err
		}
		defer c.Close()
		conns[i] = c
	}
	for n := 0; n < cfg.N1; n++ {
		order := []int{0, 1}
		if n%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			s := sides[i]
			t := time.Now()
			res, err := conns[i].Do()
			if err != nil {
				return a, b, err
			}
			s.lat = append(s.lat, time.Since(t))
			s.steps = append(s.steps, res.Phases)
			s.forked = append(s.forked, res.Forked)
			time.Sleep(cfg.Gap)
		}
	}
	for _, s := range sides {
		o := s.out
		if cfg.Rounds > 0 {
			o.DaemonCPU = s.cpu[0] / time.Duration(cfg.Rounds)
			o.ZygoteCPU = s.cpu[1] / time.Duration(cfg.Rounds)
			o.Throughput = merge(s.rounds).Throughput
			o.Forked8 = s.forked8 / float64(cfg.Rounds)
		}
		o.Forked1 = share(s.forked)
		sort.Slice(s.lat, func(i, j int) bool { return s.lat[i] < s.lat[j] })
		o.P50 = s.lat[len(s.lat)/2]
		o.P90 = s.lat[len(s.lat)*9/10]
		o.Phases = medianSteps(s.steps)
	}
	return a, b, nil
}

// ABTable formats RunAB's outcome as a Markdown table, B's figures beside
// A's with B/A.
func ABTable(a, b ABSide) string {
	var sb strings.Builder
	row := func(what string, x, y float64, unit string) {
		r := 0.0
		if x != 0 {
			r = y / x
		}
		fmt.Fprintf(&sb, "| %s | %.3f%s | %.3f%s | %.2f |\n", what, x, unit, y, unit, r)
	}
	sb.WriteString("| | A | B | B/A |\n|---|---|---|---|\n")
	row("daemon CPU per request, 8 clients", ms(a.DaemonCPU), ms(b.DaemonCPU), " ms")
	row("zygote side CPU per request, 8 clients", ms(a.ZygoteCPU), ms(b.ZygoteCPU), " ms")
	row("throughput, 8 clients", a.Throughput, b.Throughput, " req/s")
	row("p50, 1 client", ms(a.P50), ms(b.P50), " ms")
	row("p90, 1 client", ms(a.P90), ms(b.P90), " ms")
	row("share of requests whose child was forked for them, 8 clients", a.Forked8, b.Forked8, "")
	row("share of requests whose child was forked for them, 1 client", a.Forked1, b.Forked1, "")
	bs := map[string]time.Duration{}
	for _, p := range b.Phases {
		bs[p.Name] = p.Dur
	}
	seen := map[string]bool{}
	for _, p := range a.Phases {
		seen[p.Name] = true
		row(p.Name, ms(p.Dur), ms(bs[p.Name]), " ms")
	}
	for _, p := range b.Phases {
		if !seen[p.Name] {
			row(p.Name, 0, ms(p.Dur), " ms")
		}
	}
	return sb.String()
}

// perfStat starts `perf stat` on the daemon and on the zygote (children
// included: perf's counters are inherited by what the zygote forks after
// it attached) and returns a function that stops it and prints the counts
// per request; a no-op when on is false or perf cannot run.
func perfStat(on bool, what string, daemon, zygote, n int, out io.Writer) func() {
	if !on {
		return func() {}
	}
	events := "raw_syscalls:sys_enter,page-faults,context-switches"
	var cmds []*exec.Cmd
	var bufs []*bytes.Buffer
	for _, pid := range []int{daemon, zygote} {
		var b bytes.Buffer
		cmd := exec.Command("perf", "stat", "-x", ",", "-e", events, "-p", strconv.Itoa(pid))
		cmd.Stderr = &b
		if err := cmd.Start(); err != nil {
			return func() {}
		}
		cmds, bufs = append(cmds, cmd), append(bufs, &b)
	}
	time.Sleep(200 * time.Millisecond) // attached before the series starts
	return func() {
		for i, cmd := range cmds {
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()
			var parts []string
			for _, line := range strings.Split(bufs[i].String(), "\n") {
				f := strings.Split(line, ",")
				if len(f) < 3 {
					continue
				}
				v, err := strconv.ParseFloat(f[0], 64)
				if err != nil {
					continue
				}
				parts = append(parts, fmt.Sprintf("%s %.1f", f[2], v/float64(n)))
			}
			fmt.Fprintf(out, "%s %s per request: %s\n", what, []string{"daemon", "zygote side"}[i], strings.Join(parts, ", "))
		}
	}
}

// faults returns pid's minor page faults and those of its waited-for
// children (/proc/PID/stat fields 10 and 11, proc(5)).
func faults(pid int) [2]int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return [2]int64{}
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 10 {
		return [2]int64{}
	}
	minflt, _ := strconv.ParseInt(f[10-3], 10, 64)
	cminflt, _ := strconv.ParseInt(f[11-3], 10, 64)
	return [2]int64{minflt, cminflt}
}
