package gvisor_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// channelProbe is run by code inside a sandbox: every way it might take the place of the
// host–guest channel or read the token. Each line is "name: result"; "OPEN" means the attempt
// worked.
const channelProbe = `
try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name: OPEN"; else echo "$name: refused"; fi; }
try rename-socket mv /zygo/host/agent.sock /zygo/host/moved
try create-file sh -c 'echo x > /zygo/host/new'
try mount-over mount -t tmpfs none /zygo/host
try read-mem sh -c 'head -c 1 /proc/1/mem'
try read-environ cat /proc/1/environ
try read-maps cat /proc/1/maps
try open-fd sh -c 'for f in /proc/1/fd/*; do cat "$f" </dev/null >/dev/null 2>&1 && exit 0; done; exit 1'
try boot-file cat /zygo/host/boot.json
try ptrace-attach /usr/bin/python3 -c 'import ctypes,sys; sys.exit(0 if ctypes.CDLL(None).ptrace(16, 1, 0, 0) == 0 else 1)'
grep CapBnd /proc/self/status
`

// capSysAdmin is bit 21 of a capability mask (capability.h).
const capSysAdmin = 1 << 21

// Code in a sandbox cannot reach the host–guest channel: the socket's directory is read-only,
// no process but PID 1 holds CAP_SYS_ADMIN (no mount over it), PID 1 is not dumpable (no
// /proc/1/mem, environ, maps or fds; no ptrace) and the boot file that carried the first token
// is gone before any service starts. It holds the same in a forked copy, and the host's copy of
// the boot file is removed too.
func TestChannelOutOfReach(t *testing.T) {
	h := newHarness(t, sandbox.DefaultReseal)
	ctx := tctx(t)
	// A service starts as early as any code can: it reports whether it saw the boot file.
	svc := guest.Service{Name: "early", Argv: []string{"/bin/sh", "-c",
		"if [ -e /zygo/host/boot.json ]; then echo SEEN > /tmp/early; else echo absent > /tmp/early; fi; sleep 1000"}}
	rec, err := h.m.Create(ctx, sandbox.CreateOptions{Name: "chan", Services: []guest.Service{svc}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(h.be.InstanceDir(rec.EngineID), "host", "boot.json")); !os.IsNotExist(err) {
		t.Errorf("the host kept the boot file: stat = %v", err)
	}
	check := func(id string) {
		t.Helper()
		out := h.sh(t, id, channelProbe)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 10 {
			t.Fatalf("probe in %s printed %d lines:\n%s", id, len(lines), out)
		}
		for _, l := range lines[:9] {
			if !strings.HasSuffix(l, ": refused") {
				t.Errorf("in %s: %s", id, l)
			}
		}
		bnd, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(lines[9], "CapBnd:")), 16, 64)
		if err != nil {
			t.Fatalf("parsing %q: %v", lines[9], err)
		}
		if bnd&capSysAdmin != 0 {
			t.Errorf("in %s: exec'd process holds CAP_SYS_ADMIN (CapBnd %x)", id, bnd)
		}
		if bnd == 0 {
			t.Errorf("in %s: exec'd process has no capabilities at all (CapBnd 0); want Docker's default set", id)
		}
		// The channel still works after every attempt.
		if got := h.sh(t, id, "echo alive"); got != "alive\n" {
			t.Errorf("in %s after the probe: %q", id, got)
		}
	}
	check(rec.ID)
	early := h.sh(t, rec.ID, "timeout 30 sh -c 'while [ ! -s /tmp/early ]; do sleep 0.05; done'; cat /tmp/early")
	if got := strings.TrimSpace(early); got != "absent" {
		t.Errorf("a service started at boot saw the boot file: %q", got)
	}
	cp, err := h.m.Checkpoint(ctx, rec.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	kids := h.forkN(t, rec.ID, cp, 1)
	check(kids[0].ID)
}
