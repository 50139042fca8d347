package engine_test

import (
	"os"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/sandbox/engine"
)

// TestUnknownBackend: a backend name nothing registers is refused by name, listing the known
// ones, before anything is made.
func TestUnknownBackend(t *testing.T) {
	dir := t.TempDir()
	_, err := engine.New(engine.Config{Backend: "firecracker", StateDir: dir + "/e", GuestBinary: "/nonexistent"})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), `"firecracker"`) || !strings.Contains(err.Error(), "gvisor") {
		t.Errorf("New(firecracker) = %v, want invalid_argument naming it and listing gvisor", err)
	}
	if _, serr := os.Stat(dir + "/e"); serr == nil {
		t.Errorf("the refused New made its state dir")
	}
	if got := engine.Names(); len(got) != 1 || got[0] != engine.Default {
		t.Errorf("Names() = %v, want [%s]", got, engine.Default)
	}
}
