package gvisor_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/gvisor"
	"github.com/zygo-run/zygo/internal/sandbox/sandboxtest"
)

// guestBin is the zygo-guest built once for the package's tests.
var guestBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "zygo-guest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	guestBin = filepath.Join(dir, "zygo-guest")
	build := exec.Command("go", "build", "-o", guestBin, "github.com/zygo-run/zygo/cmd/zygo-guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building zygo-guest: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// newBackend returns a backend on a fresh state dir, failing (never skipping) when runsc is
// missing.
func newBackend(t testing.TB, stateDir string) *gvisor.Backend {
	t.Helper()
	b, err := gvisor.New(gvisor.Config{StateDir: stateDir, GuestBinary: guestBin})
	if err != nil {
		t.Fatalf("gVisor backend: %v\nInstall the pinned runsc with: sudo scripts/install-runsc.sh", err)
	}
	t.Cleanup(func() {
		_ = b.Close()
		// Fails while a later backend on the same state still has containers; the
		// earliest backend's cleanup runs last and releases.
		if err := b.ReleaseHost(context.Background()); err != nil && !errdefs.IsFailedPrecondition(err) {
			t.Errorf("releasing host resources: %v", err)
		}
	})
	return b
}

// stateDir returns a short state dir: unix socket paths are limited to 108 bytes.
func stateDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", "zg-")
	if err == nil {
		err = os.Chmod(d, 0o711) // traversed by the sandboxes' own uids, as the daemon's is
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T) (sandbox.Backend, func(*testing.T) sandbox.Backend) {
		dir := stateDir(t)
		return newBackend(t, dir), func(t *testing.T) sandbox.Backend { return newBackend(t, dir) }
	})
}
