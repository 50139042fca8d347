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
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := bench.Run(ctx, bench.Config{Root: *root, N: *n, CPUN: *cpuN, Zygo: *zygoBin, CPUProfile: *profile, PoolTenants: *poolTenants, Progress: os.Stdout})
	if err != nil {
		fmt.Fprintln(os.Stderr, "zygo-bench:", err)
		os.Exit(1)
	}
	if *out != "" {
		if err := os.WriteFile(*out, []byte(rep.Markdown()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "zygo-bench:", err)
			os.Exit(1)
		}
		fmt.Println("\nwrote", *out)
	}
}
