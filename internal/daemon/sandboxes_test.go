package daemon

import (
	"strings"
	"testing"
)

func TestEngineDir(t *testing.T) {
	if MaxEngineDir != 54 {
		t.Errorf("MaxEngineDir = %d; the socket path arithmetic changed", MaxEngineDir)
	}
	if d, err := engineDir("/var/lib/zygo", ""); err != nil || d != "/var/lib/zygo/gv" {
		t.Errorf("short state dir: %q %v", d, err)
	}
	long := "/tmp/" + strings.Repeat("x", 60)
	d, err := engineDir(long, "")
	if err != nil || !strings.HasPrefix(d, "/run/zygo/gv-") || len(d) > MaxEngineDir {
		t.Errorf("long state dir: %q %v", d, err)
	}
	if d2, _ := engineDir(long+"y", ""); d2 == d {
		t.Errorf("two long state dirs share the engine dir %s", d)
	}
	if _, err := engineDir("/var/lib/zygo", long); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("a configured engine dir that is too long: %v", err)
	}
}

func TestFindGuestBinary(t *testing.T) {
	if _, err := findGuestBinary("/nonexistent/zygo-guest"); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Errorf("missing guest: %v", err)
	}
	// /bin/sh is dynamically linked on every host we run on: not usable as PID 1 of a sandbox.
	if _, err := findGuestBinary("/bin/sh"); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("dynamic guest: %v", err)
	}
}
