package daemon_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/daemon"
)

// TestKeepVersionsBounds: a --keep-versions outside 1..MaxKeepVersions stops the daemon at
// start, naming the flag, before it serves anything.
func TestKeepVersionsBounds(t *testing.T) {
	requireBwrap(t)
	for _, n := range []int{-1, daemon.MaxKeepVersions + 1} {
		cfg := config(t, stateDir(t))
		cfg.KeepVersions = n
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := daemon.Run(ctx, cfg, func() { t.Error("the daemon started") })
		cancel()
		if err == nil || !strings.Contains(err.Error(), "--keep-versions") {
			t.Errorf("Run with --keep-versions %d = %v, want a refusal naming it", n, err)
		}
	}
}
