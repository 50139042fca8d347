// Command fakeagent runs a guest agent (internal/guest) as an ordinary process on the host, for
// sandboxtest.FakeBackend: not PID 1, its own root directory for the files the agent owns, so
// it never rewrites the host's /etc. Each instance is a process of its own so that its reaper
// only ever collects its own children. Not a sandbox: what it executes runs on the host.
//
// Usage: fakeagent SOCKET BOOTFILE RUNDIR ROOT
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/zygo-run/zygo/internal/guest"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: fakeagent SOCKET BOOTFILE RUNDIR ROOT")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	a := guest.New(guest.Config{SocketPath: os.Args[1], BootPath: os.Args[2], RunDir: os.Args[3], Root: os.Args[4]})
	if err := a.Boot(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fakeagent: booting:", err)
		os.Exit(1)
	}
	if err := a.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fakeagent: running:", err)
		os.Exit(1)
	}
}
