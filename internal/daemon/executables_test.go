package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/daemon"
)

// untrustedFile returns a copy of the host's bwrap (an executable) in a new directory, changed
// by change (made writable by others, or given to nobody).
func untrustedFile(t *testing.T, name string, change func(p string) error) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := change(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUntrustedExecutablesStopTheDaemon: a binary the daemon would run as root or put into a
// sandbox (bwrap, runsc, the rand guard, the guest binary) that a user other than root could
// change stops the daemon at start, naming the flag, the path and why; the host's bwrap (found
// on PATH) passes.
func TestUntrustedExecutablesStopTheDaemon(t *testing.T) {
	requireBwrap(t)
	worldWritable := func(p string) error { return os.Chmod(p, 0o777) }
	nobodys := func(p string) error { return os.Chown(p, 65534, 65534) }
	for _, tc := range []struct {
		flag, why string
		set       func(cfg *daemon.Config, p string)
		change    func(p string) error
	}{
		{"--bwrap", "writable by its group or by others", func(c *daemon.Config, p string) { c.Bwrap = p }, worldWritable},
		{"--bwrap", "owned by uid 65534", func(c *daemon.Config, p string) { c.Bwrap = p }, nobodys},
		{"--runsc", "writable by its group or by others", func(c *daemon.Config, p string) { c.Sandbox.Runsc = p }, worldWritable},
		{"--rand-guard", "owned by uid 65534", func(c *daemon.Config, p string) { c.RandGuard = p }, nobodys},
		{"--guest-binary", "writable by its group or by others", func(c *daemon.Config, p string) { c.Sandbox.GuestBinary = p }, worldWritable},
	} {
		p := untrustedFile(t, "bin", tc.change)
		cfg := config(t, stateDir(t))
		cfg.Sandbox.Disabled = false // runsc and the guest binary are checked only when sandboxes run
		tc.set(&cfg, p)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := daemon.Run(ctx, cfg, func() { t.Errorf("%s %s: the daemon started", tc.flag, p) })
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.flag+" "+p) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s %s (%s): Run = %v, want a refusal naming the flag, the path and why", tc.flag, p, tc.why, err)
		}
	}
}
