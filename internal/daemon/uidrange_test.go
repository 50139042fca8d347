package daemon_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
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
	if err := os.WriteFile(passwd, []byte("root:x:0:0::/root:/bin/sh\nsvc:x:1900000008:1900000008::/:/sbin/nologin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	subuid := filepath.Join(etc, "subuid")
	if err := os.WriteFile(subuid, []byte("alice:300000:65536\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		uidRange, want string
	}{
		{"1900000000-1900065535", `"svc" has id 1900000008`}, // outside the auto window (no parallel test daemon claims it)
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

// A range in which a host process not of this daemon runs is refused,
// naming the process.
func TestStartRefusedWhenAProcessRunsInTheUIDRange(t *testing.T) {
	requireBwrap(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: it runs a process as another uid")
	}
	const id = 1901000000 // outside the auto window: no parallel test daemon claims it
	cmd := exec.Command("/bin/sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: id, Gid: id}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	cfg := config(t, stateDir(t))
	cfg.UIDRange = fmt.Sprintf("%d:10", id-5)
	err := daemon.Run(context.Background(), cfg, func() { t.Error("the daemon started") })
	if want := fmt.Sprintf("process %d runs as id %d", cmd.Process.Pid, id); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%v, want a refusal naming %q", err, want)
	}
}

// uidRangeOf returns the uid range a started daemon logged ("" if none).
func uidRangeOf(logs *syncBuffer) string {
	m := regexp.MustCompile(`msg="function uids" uid_range=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		return ""
	}
	return m[1]
}

// Daemons started at once with the default (auto) range each claim a block
// of their own on the host; a daemon asking for a block another live daemon
// claims is refused with that daemon's pid and state dir; a restarted daemon
// takes the block of its last run again, though a lower one is free.
func TestDaemonsClaimUIDRangesOfTheirOwn(t *testing.T) {
	requireBwrap(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: only a root daemon owns a uid range")
	}
	dirs := []string{stateDir(t), stateDir(t)}
	ranges := make([]string, 2)
	ds := make([]*running, 2)
	for i, dir := range dirs {
		cfg, logs := configWithLog(t, dir)
		ds[i] = start(t, cfg)
		ranges[i] = uidRangeOf(logs)
	}
	if ranges[0] == "" || ranges[0] == ranges[1] {
		t.Fatalf("two daemons' uid ranges: %q, %q; want two different blocks", ranges[0], ranges[1])
	}
	cfg := config(t, stateDir(t))
	cfg.UIDRange = ranges[0]
	err := daemon.Run(context.Background(), cfg, func() { t.Error("a daemon started on a claimed range") })
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) || !strings.Contains(err.Error(), dirs[0]) {
		t.Errorf("a claimed range: %v, want a refusal naming pid %d and %s", err, os.Getpid(), dirs[0])
	}
	for _, d := range ds {
		if err := d.stop(t); err != nil {
			t.Fatal(err)
		}
	}
	cfg, logs := configWithLog(t, dirs[1])
	d := start(t, cfg)
	defer d.stop(t)
	if got := uidRangeOf(logs); got != ranges[1] {
		t.Errorf("restarted, the second daemon has %q, want its block of the last run %q", got, ranges[1])
	}
}
