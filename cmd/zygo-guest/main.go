// Command zygo-guest is PID 1 of every Zygo gVisor sandbox: it reads its boot file, dials the
// host's socket in /zygo/host and serves exec, run-code, files, reseal, its process table and
// filesystem operations (package internal/guest). It must be built static: CGO_ENABLED=0 go build ./cmd/zygo-guest.
//
// Hidden subcommand: `zygo-guest probe ...` is the Go probe of `zygo check sandboxes`
// (package internal/forkcheck/goprobe); it is here because this binary is inside every sandbox.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/zygo-run/zygo/internal/forkcheck/goprobe"
	"github.com/zygo-run/zygo/internal/guest"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		os.Exit(goprobe.Main(os.Args[2:], os.Stdout, os.Stderr))
	}
	// PID 1's stderr is a host file (the instance's runsc.log): what the agent logs there is
	// bounded over its whole life, whatever code in the sandbox makes it log. SetDefault sends
	// the standard log package (x/net/http2's messages) through the same bound.
	stderr := guest.NewCappedWriter(os.Stderr, guest.MaxAgentLogBytes)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	slog.SetDefault(log)
	if os.Getpid() == 1 {
		if err := guest.HardenPID1(); err != nil {
			log.Error("hardening zygo-guest", "err", err)
			os.Exit(1)
		}
	}
	a := guest.New(guest.Config{Log: log})
	ctx := context.Background() // PID 1 lives until the sandbox is killed
	if err := a.Boot(ctx); err != nil {
		log.Error("booting zygo-guest", "err", err)
		os.Exit(1)
	}
	if err := a.Run(ctx); err != nil {
		log.Error("running zygo-guest", "err", err)
		os.Exit(1)
	}
}
