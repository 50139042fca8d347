//go:build !linux

package cli

import "github.com/spf13/cobra"

// daemonCommands: the daemon runs on Linux only; elsewhere the CLI drives a remote one
// (--addr https://HOST:PORT or the context file).
func daemonCommands(*globals) []*cobra.Command { return nil }

// beforeSignals: nothing runs before the signal handlers where the daemon does not run.
func beforeSignals([]string) {}
