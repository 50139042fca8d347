// Command zygo-bench runs Zygo's benchmarks side by side in one run, prints
// the table and writes it to docs/BENCHMARKS.md (see internal/bench).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/zygo-run/zygo/internal/bench"
)

func main() {
	root := flag.String("root", ".", "repository root")
	out := flag.String("out", "docs/BENCHMARKS.md", "where to write the report (\"\" for nowhere)")
	n := flag.Int("n", 200, "requests per warm series")
	cpuN := flag.Int("cpu-n", 1000, "requests of the 8-client series CPU per request is read over")
	zygoBin := flag.String("zygo", "", "zygo binary the daemon runs from (default ROOT/bin/zygo)")
	poolTenants := flag.Int("pool-tenants", 100, "tenants of the pool memory row, and function zygotes it is compared with")
	profile := flag.String("cpuprofile", "", "write the daemon's Go CPU profile over the run to this file")
	ab := flag.String("ab", "", "instead of the bench: compare this zygo binary (A) with -zygo (B) side by side, requests alternating (internal/bench RunAB)")
	abFn := flag.String("ab-function", "stats", "the example -ab deploys on both daemons")
	abRounds := flag.Int("ab-rounds", 4, "-ab: rounds of -ab-n8 requests at 8 clients per daemon, alternating which goes first (-1: none)")
	abN8 := flag.Int("ab-n8", 300, "-ab: requests per 8-client round per daemon")
	abGap := flag.Duration("ab-gap", 0, "-ab: pause after each one-client request (250ms for Node workers)")
	only := flag.String("only", "", "run warm and only these steps after it, comma-separated (ideal,cold,floor,node,growth,scale,memory,pools; \"warm\" alone: warm only); the report is then not written to -out")
	abPerf := flag.Bool("ab-perf", false, "-ab: count system calls, page faults and context switches per request with perf stat")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *ab != "" {
		b := *zygoBin
		if b == "" {
			b = *root + "/bin/zygo"
		}
		sa, sb, err := bench.RunAB(ctx, bench.ABConfig{Root: *root, A: *ab, B: b, Function: *abFn, Rounds: *abRounds, N8: *abN8, N1: *n, CPUProfile: *profile, Perf: *abPerf, Gap: *abGap, Progress: os.Stdout})
		if err != nil {
			fmt.Fprintln(os.Stderr, "zygo-bench:", err)
			os.Exit(1)
		}
		fmt.Print(bench.ABTable(sa, sb))
		return
	}
	steps, onlyWarm, err := bench.ParseOnly(*only)
	if err != nil { // before a daemon starts
		fmt.Fprintln(os.Stderr, "zygo-bench:", err)
		os.Exit(2)
	}
	partial := len(steps) > 0 || onlyWarm
	rep, err := bench.Run(ctx, bench.Config{Root: *root, N: *n, CPUN: *cpuN, Zygo: *zygoBin, CPUProfile: *profile, PoolTenants: *poolTenants, Only: steps, OnlyWarm: onlyWarm, Progress: os.Stdout})
	if err != nil {
		fmt.Fprintln(os.Stderr, "zygo-bench:", err)
		os.Exit(1)
	}
	if *out != "" && !partial { // a partial run would overwrite the whole table
		if err := os.WriteFile(*out, []byte(rep.Markdown()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "zygo-bench:", err)
			os.Exit(1)
		}
		fmt.Println("\nwrote", *out)
	}
}
