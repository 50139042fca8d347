// Command sdk-go shows the Go SDK (sdk/go/zygo) end to end: it creates a sandbox, runs code in
// its persistent interpreter, writes a file, checkpoints it, forks it three ways and prints
// each child's generation, then removes what it made.
//
//	make build && sudo bin/zygo serve &          # a daemon with gVisor sandboxes
//	go run ./examples/sdk-go [--socket /var/lib/zygo/zygo.sock]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/zygo-run/zygo/sdk/go/zygo"
)

func main() {
	socket := flag.String("socket", zygo.DefaultSocket(), "the daemon's unix socket")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, zygo.NewClient(*socket)); err != nil {
		fmt.Fprintln(os.Stderr, "sdk-go:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c *zygo.Client) error {
	sb, err := c.Create(ctx, zygo.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating a sandbox: %w", err)
	}
	defer sb.Remove(context.WithoutCancel(ctx))
	fmt.Printf("sandbox %s generation %s\n", sb.ID, sb.Generation)

	res, err := sb.RunCode(ctx, "x = 41\nimport random")
	if err != nil {
		return fmt.Errorf("run-code: %w", err)
	}
	if !res.OK {
		return fmt.Errorf("run-code: %s", res.Error)
	}
	if err := sb.WriteFile(ctx, "/root/notes.txt", []byte("written before the checkpoint\n"), 0o644); err != nil {
		return fmt.Errorf("writing a file: %w", err)
	}
	cp, err := sb.Checkpoint(ctx, "sdk-example")
	if err != nil {
		return fmt.Errorf("checkpointing: %w", err)
	}
	defer c.RemoveCheckpoint(context.WithoutCancel(ctx), cp.ID) // after the children are gone
	fmt.Printf("checkpoint %s (%d bytes)\n", cp.ID, cp.SizeBytes)

	fork, err := sb.Fork(ctx, 3, cp.ID)
	if err != nil {
		return fmt.Errorf("forking: %w", err)
	}
	for i, ch := range fork.Children {
		if ch.Err != nil {
			fmt.Printf("child %d failed: %v\n", i, ch.Err)
			continue
		}
		defer ch.Sandbox.Remove(context.WithoutCancel(ctx))
		res, err := ch.Sandbox.RunCode(ctx, "(x + 1, random.random())")
		if err != nil {
			return fmt.Errorf("run-code in child %s: %w", ch.Sandbox.ID, err)
		}
		if !res.OK {
			return fmt.Errorf("run-code in child %s: %s", ch.Sandbox.ID, res.Error)
		}
		notes, err := ch.Sandbox.ReadFile(ctx, "/root/notes.txt")
		if err != nil {
			return fmt.Errorf("reading the file in child %s: %w", ch.Sandbox.ID, err)
		}
		fmt.Printf("child %d %s generation %s (x + 1, random) = %s, file %q\n",
			i, ch.Sandbox.ID, ch.Sandbox.Generation, res.Value, notes)
	}
	if len(fork.Running()) != len(fork.Children) {
		return fmt.Errorf("%d of %d children failed", len(fork.Children)-len(fork.Running()), len(fork.Children))
	}
	return nil
}
