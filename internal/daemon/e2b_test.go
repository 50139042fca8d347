package daemon_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/daemon"
)

// --e2b beyond loopback is refused without TLS, naming the flag and the address, before
// anything is written; a bad --template stops the daemon naming it.
func TestE2BOnlyLoopback(t *testing.T) {
	requireBwrap(t)
	for _, addr := range []string{"0.0.0.0:7777", ":7777", "192.0.2.1:7777", "example.com:80"} {
		cfg := config(t, stateDir(t))
		cfg.E2B = addr
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := daemon.Run(ctx, cfg, func() { t.Error("the daemon started") })
		cancel()
		if err == nil || !strings.Contains(err.Error(), "--e2b") || !strings.Contains(err.Error(), "only with TLS") ||
			!strings.Contains(err.Error(), addr) {
			t.Errorf("Run with --e2b %s = %v, want a refusal naming it", addr, err)
		}
	}
	for _, tm := range []string{"nodir", "base=/srv", "x=relative", "x=/nonexistent/zygo-root"} {
		cfg := config(t, stateDir(t))
		cfg.Sandbox.Templates = []string{tm}
		err := daemon.Run(context.Background(), cfg, func() { t.Error("the daemon started") })
		if err == nil || !strings.Contains(err.Error(), "--template") || !strings.Contains(err.Error(), tm) {
			t.Errorf("Run with --template %s = %v, want a refusal naming it", tm, err)
		}
	}
}
