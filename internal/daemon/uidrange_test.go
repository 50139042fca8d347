package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/daemon"
	"github.com/zygo-run/zygo/internal/hostid"
)

// A root daemon refuses to start when its uid range holds an account of
// /etc/passwd (here a temporary one) or overlaps a subordinate range, saying
// which entry and how to choose another; it leaves nothing listening.
func TestStartRefusedWhenTheUIDRangeIsInUse(t *testing.T) {
	requireBwrap(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: only a root daemon owns a uid range")
	}
	etc := t.TempDir()
	passwd := filepath.Join(etc, "passwd")
	if err := os.WriteFile(passwd, []byte("root:x:0:0::/root:/bin/sh\nsvc:x:1879048200:1879048200::/:/sbin/nologin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	subuid := filepath.Join(etc, "subuid")
	if err := os.WriteFile(subuid, []byte("alice:300000:65536\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		uidRange, want string
	}{
		{"", `"svc" has id 1879048200`},
		{"310000:10", `"alice" has 300000-365535`},
		{"65000-66000", "nobody"},
	} {
		dir := stateDir(t)
		cfg := config(t, dir)
		cfg.UIDRange = c.uidRange
		cfg.HostFiles = hostid.HostFiles{Passwd: passwd, SubUID: subuid}
		err := daemon.Run(context.Background(), cfg, func() { t.Error("the daemon started") })
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--uid-range") {
			t.Errorf("uid range %q: %v, want a refusal naming %s and --uid-range", c.uidRange, err, c.want)
		}
		if _, err := os.Stat(daemon.SocketPath(dir)); err == nil {
			t.Errorf("uid range %q: the refused daemon left its socket", c.uidRange)
		}
	}
}
