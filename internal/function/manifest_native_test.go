package function_test

import (
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/function"
)

// TestOnNativeRandomKey checks what the README's manifest block says of on_native_random:
// Python's default is "warn", "spawn" is the other value, anything else and any value for
// Node are errors naming the key.
func TestOnNativeRandomKey(t *testing.T) {
	if m, err := function.ParseManifest([]byte(pyBase)); err != nil || m.OnNativeRandom != function.NativeRandomWarn {
		t.Errorf("python default: %+v, %v; want on_native_random %q", m, err, function.NativeRandomWarn)
	}
	if m, err := function.ParseManifest([]byte(pyBase + "on_native_random = \"spawn\"\n")); err != nil || m.OnNativeRandom != "spawn" {
		t.Errorf("spawn: %v", err)
	}
	for _, bad := range []string{pyBase + "on_native_random = \"fork\"\n", nodeBase + "on_native_random = \"warn\"\n"} {
		if _, err := function.ParseManifest([]byte(bad)); err == nil || !strings.Contains(err.Error(), "on_native_random") {
			t.Errorf("ParseManifest(%q) = %v, want an error naming on_native_random", bad, err)
		}
	}
}
