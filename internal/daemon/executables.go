package daemon

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox/gvisor"
	"github.com/zygo-run/zygo/internal/trusted"
)

// checkExecutables fails, naming the flag (which is also the config file's key), the path and
// why, unless every file the daemon will execute as root or put into a sandbox is one only root
// (or the daemon's uid) can change (trusted.File): bwrap, runsc, the native-randomness guard
// and the guest binary, each as the daemon resolves it (a flag or the config file, else its
// default or PATH lookup). A file that is not there is left to the code that uses it, which
// says so in its own words (a missing guard or runsc disables what needs it).
func (c *Config) checkExecutables() error {
	euid := os.Geteuid()
	files := []struct{ flag, path string }{
		{"--bwrap", c.Bwrap},
		{"--rand-guard", randGuardSource(c.RandGuard)},
	}
	if !c.Sandbox.Disabled {
		files = append(files, struct{ flag, path string }{"--runsc", gvisor.ResolveRunsc(c.Sandbox.Runsc)})
		p := c.Sandbox.GuestBinary
		if p == "" {
			p, _ = guest.FindBinary("", "zygo serve --guest-binary")
		}
		files = append(files, struct{ flag, path string }{"--guest-binary", p})
	}
	for _, f := range files {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			continue
		}
		abs, err := filepath.Abs(f.path)
		if err != nil {
			return fmt.Errorf("%s %s: %w", f.flag, f.path, err)
		}
		if err := trusted.File(abs, euid); err != nil {
			return fmt.Errorf("%s %s: the daemon would run it as root or in its sandboxes, but %w", f.flag, f.path, err)
		}
	}
	return nil
}
