// Command zygo-guest is PID 1 of every Zygo gVisor sandbox: it reads its boot file, dials the
// host's socket in /zygo/host and serves exec, run-code, files and reseal (package
// internal/guest). It must be built static: CGO_ENABLED=0 go build ./cmd/zygo-guest.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/zygo-run/zygo/internal/guest"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
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
