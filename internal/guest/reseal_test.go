package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// watchClock replaces setWallClock for the test: it records every call and returns err.
func watchClock(t *testing.T, err error) *[]time.Time {
	t.Helper()
	var mu sync.Mutex
	calls := &[]time.Time{}
	old := setWallClock
	setWallClock = func(at time.Time) error {
		mu.Lock()
		defer mu.Unlock()
		*calls = append(*calls, at)
		return err
	}
	t.Cleanup(func() { setWallClock = old })
	return calls
}

func resealReq(token string, hostTime time.Time) ResealRequest {
	return ResealRequest{
		NewToken:  token,
		Identity:  Identity{SandboxID: "sb-test", Generation: strings.Repeat("ef", 16)},
		MachineID: strings.Repeat("01", 16),
		Entropy:   make([]byte, 32),
		HostTime:  hostTime,
	}
}

// A guest whose wall clock is an hour off the host's is set to the host's time at reseal.
func TestResealCorrectsAClockThatIsOff(t *testing.T) {
	calls := watchClock(t, nil)
	c, _ := startPair(t, strings.Repeat("t", 64))
	ctx := waitCtx(t)
	host := time.Now().Add(-time.Hour) // the host says it is an hour earlier
	res, err := c.Reseal(ctx, resealReq(strings.Repeat("n", 64), host))
	if err != nil {
		t.Fatal(err)
	}
	if !res.ClockCorrected || len(*calls) != 1 {
		t.Fatalf("clock offset %v: corrected=%v, %d set calls", res.ClockOffset, res.ClockCorrected, len(*calls))
	}
	if d := (*calls)[0].Sub(host); d < 0 || d > 2*time.Second {
		t.Errorf("clock set to %v, want the host's %v (plus transit)", (*calls)[0], host)
	}
	if res.ClockOffset < 59*time.Minute || res.ClockOffset > 61*time.Minute {
		t.Errorf("clock offset %v, want about +1h", res.ClockOffset)
	}
}

// Within ClockTolerance the clock is left alone.
func TestResealLeavesAClockThatIsRight(t *testing.T) {
	calls := watchClock(t, nil)
	c, _ := startPair(t, strings.Repeat("t", 64))
	res, err := c.Reseal(waitCtx(t), resealReq(strings.Repeat("n", 64), time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if res.ClockCorrected || len(*calls) != 0 || res.ClockOffset.Abs() > ClockTolerance {
		t.Errorf("offset %v: corrected=%v, %d set calls", res.ClockOffset, res.ClockCorrected, len(*calls))
	}
}

// A clock that is off and cannot be set fails the reseal before any other step: the token is
// not rotated (the copy keeps answering to the old one until the host destroys it).
func TestResealFailsWhenTheClockCannotBeSet(t *testing.T) {
	watchClock(t, unix.EPERM)
	old := strings.Repeat("t", 64)
	c, _ := startPair(t, old)
	ctx := waitCtx(t)
	_, err := c.Reseal(ctx, resealReq(strings.Repeat("n", 64), time.Now().Add(10*time.Minute)))
	if err == nil || !strings.Contains(err.Error(), "cannot be set") {
		t.Fatalf("reseal with an unsettable clock = %v, want a clock error", err)
	}
	if _, err := c.Info(ctx); err != nil {
		t.Errorf("after the failed reseal the old token no longer works: %v", err)
	}
	if _, err := c.Reseal(ctx, ResealRequest{NewToken: strings.Repeat("n", 64), Identity: Identity{Generation: strings.Repeat("ef", 16)}, Entropy: make([]byte, 32)}); err == nil {
		t.Error("a reseal without host_time was accepted")
	}
}

// An agent that is not PID 1 refuses to boot with the host's / as its root: it would rewrite
// this machine's /etc/machine-id, SSH host keys and /run/secrets (it once did, from a test).
// With a root of its own, reseal writes there and nowhere else.
func TestAgentOffPID1NeverTouchesHostFiles(t *testing.T) {
	dir := t.TempDir()
	boot, _ := json.Marshal(Boot{Token: strings.Repeat("t", 64)})
	os.WriteFile(filepath.Join(dir, "boot.json"), boot, 0o600)
	a := New(Config{SocketPath: filepath.Join(dir, "s"), BootPath: filepath.Join(dir, "boot.json"), RunDir: filepath.Join(dir, "run")})
	if err := a.Boot(context.Background()); err == nil || !strings.Contains(err.Error(), "Config.Root") {
		t.Fatalf("Boot off PID 1 with Root / = %v, want a refusal naming Config.Root", err)
	}
	hostID, _ := os.ReadFile("/etc/machine-id")
	c, sock := startPair(t, strings.Repeat("t", 64))
	req := resealReq(strings.Repeat("n", 64), time.Now())
	req.Identity.Hostname = "not-this-host"
	req.Secrets = map[string][]byte{"K": []byte("v")}
	if _, err := c.Reseal(waitCtx(t), req); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(filepath.Dir(sock), "root")
	for p, want := range map[string]string{"/etc/machine-id": req.MachineID + "\n", "/etc/hostname": "not-this-host\n", SecretsDir + "/K": "v"} {
		if got, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(got) != want {
			t.Errorf("%s under the agent's root = %q, %v; want %q", p, got, err, want)
		}
	}
	if now, _ := os.ReadFile("/etc/machine-id"); !bytes.Equal(now, hostID) {
		t.Errorf("the host's /etc/machine-id changed from %q to %q", hostID, now)
	}
	if h, _ := os.Hostname(); h == "not-this-host" {
		t.Error("the host's hostname was changed")
	}
}
