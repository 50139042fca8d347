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
