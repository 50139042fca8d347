package guest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Per-machine secrets an image may carry (case BH-20): every copy must get its own, or none.
var (
	// hostKeyGlob matches OpenSSH's private host keys; each has a .pub beside it.
	hostKeyGlob = "/etc/ssh/ssh_host_*_key"
	// seedFiles are boot-time random seeds that a copy must not replay.
	seedFiles = []string{"/var/lib/systemd/random-seed", "/var/lib/random-seed"}
	// sshKeygen makes fresh host keys when it exists in the sandbox.
	sshKeygen = "/usr/bin/ssh-keygen"
)

// renewHostSecrets removes seed files and replaces every SSH host key with a fresh one (or
// removes it when ssh-keygen is missing: no key is better than a key shared with siblings). It
// returns one line per file it touched, and an error when a shared secret could not be
// removed: the copy must then be destroyed.
func (a *Agent) renewHostSecrets(ctx context.Context) ([]string, error) {
	var out []string
	for _, p := range seedFiles {
		switch err := os.Remove(a.path(p)); {
		case err == nil:
			out = append(out, "removed "+p)
		case !os.IsNotExist(err):
			return out, fmt.Errorf("removing %s: %w", p, err)
		}
	}
	keys, _ := filepath.Glob(a.path(hostKeyGlob))
	for _, k := range keys {
		for _, p := range []string{k, k + ".pub"} {
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				return out, fmt.Errorf("removing host key %s: %w", p, err)
			}
		}
		typ := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(k), "ssh_host_"), "_key")
		if err := a.runQuiet(ctx, sshKeygen, "-q", "-N", "", "-t", typ, "-f", k); err != nil {
			a.log.Warn("host key removed, not regenerated", "key", k, "err", err)
			out = append(out, "removed "+k)
			continue
		}
		out = append(out, "regenerated "+k)
	}
	return out, nil
}

// runQuiet runs argv through the reaper and returns an error unless it exits 0.
func (a *Agent) runQuiet(ctx context.Context, argv ...string) error {
	if _, err := os.Stat(argv[0]); err != nil {
		return err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = a.baseEnv()
	cmd.Dir = "/"
	done, err := a.reaper.start(cmd)
	if err != nil {
		return err
	}
	select {
	case ws := <-done:
		if st := exitStatus(ws); st.Code != 0 {
			return fmt.Errorf("%s exited with %d", argv[0], st.Code)
		}
		return nil
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		return ctx.Err()
	}
}
