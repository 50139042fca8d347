package daemon

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/zygo-run/zygo/internal/nsbox"
)

// RandGuardName is the file name of the native-randomness guard that
// `make build` compiles from agents/native/zygo_rand.c next to bin/zygo.
const RandGuardName = "zygo_rand.so"

// randGuardSource returns the native-randomness guard installRandGuard copies: configured
// when set, else RandGuardName next to the running executable ("" when that cannot be found).
func randGuardSource(configured string) string {
	if configured != "" {
		return configured
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(exe), RandGuardName)
}

// installRandGuard copies the native-randomness guard (configured path, else
// RandGuardName next to the running executable) into agentDir/native, where
// sandboxes see it at nsbox.RandGuardPath, and reports whether it is there.
// A guard that is missing is not an error: the daemon logs how to build it,
// and every fork-mode zygote's warm-up check native_random says it is
// unguarded. A configured path that cannot be read is an error.
func installRandGuard(configured, agentDir string, log *slog.Logger) (bool, error) {
	src := randGuardSource(configured)
	b, err := os.ReadFile(src)
	if err != nil {
		if configured != "" {
			return false, fmt.Errorf("reading the native-randomness guard: %w", err)
		}
		log.Warn("the native-randomness guard " + RandGuardName + " is not next to the zygo binary: fork-mode functions start without it, and their warm-up check native_random cannot see native libraries that draw OS randomness at import; build it with `make build` (needs gcc: apt-get install gcc)")
		return false, nil
	}
	dst := filepath.Join(agentDir, filepath.FromSlash(nsbox.RandGuardPath[len(nsbox.AgentDir)+1:]))
	if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, b) {
		return true, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return false, fmt.Errorf("installing the native-randomness guard: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".zygo_rand-")
	if err != nil {
		return false, fmt.Errorf("installing the native-randomness guard: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o444)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return false, fmt.Errorf("installing the native-randomness guard: %w", err)
	}
	return true, nil
}
