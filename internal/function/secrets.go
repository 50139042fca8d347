package function

import (
	"context"
	"fmt"
	"sync"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/redact"
	"github.com/zygo-run/zygo/internal/untrusted"
)

// Secrets is what the Manager needs from the secret store.
type Secrets interface {
	// Missing returns the names that are not stored.
	Missing(ctx context.Context, names []string) ([]string, error)
	// Value decrypts one secret; the caller never logs it.
	Value(ctx context.Context, name string) ([]byte, error)
}

// secretFiles manages the files of one sandbox's /run/secrets (a host
// directory bound read-only into the sandbox, owned by the sandbox uid).
// Files are written from outside the sandbox before a request is told GO,
// and removed when the last request that needed them ends. The directory
// is the sandbox's, so every operation in it goes by descriptor through an
// untrusted.Dir: a name planted there (a symlink to a host file) is
// replaced or removed, never followed.
type secretFiles struct {
	dir string // host directory; its parent is the daemon's
	uid int    // host uid of the sandbox (0: keep ours)

	mu    sync.Mutex // guards users and the directory's contents
	users int
}

// maxSecretFiles bounds how many entries removal lists in a secrets dir.
const maxSecretFiles = 4096

// acquire writes every value as dir/NAME (mode 0400, owned by the sandbox
// uid; each file written to a temporary name and renamed, so a reader sees
// the old or the new value, never half) and counts a user. On error no user
// is counted, and when there is no other user the files written so far are
// removed.
func (s *secretFiles) acquire(values map[string][]byte) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := untrusted.OpenDir(s.dir)
	if err != nil {
		return fmt.Errorf("opening secrets dir: %w", err)
	}
	defer d.Close()
	defer func() {
		if err != nil && s.users == 0 {
			s.removeAllLocked(d)
		}
	}()
	for name, v := range values {
		tmp := "." + name + ".new"
		_ = d.Remove(tmp) // left by a write that failed half way
		if err := d.WriteFile(tmp, v, 0o400); err != nil {
			return fmt.Errorf("writing secret file %s: %w", name, err)
		}
		if s.uid != 0 {
			if err := d.Chown(tmp, s.uid, s.uid); err != nil {
				_ = d.Remove(tmp)
				return fmt.Errorf("chowning secret file %s: %w", name, err)
			}
		}
		if err := d.Rename(tmp, name); err != nil {
			_ = d.Remove(tmp)
			return fmt.Errorf("placing secret file %s: %w", name, err)
		}
	}
	s.users++
	return nil
}

// release counts a user out and removes every file when none is left.
func (s *secretFiles) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users--; s.users > 0 {
		return
	}
	s.users = 0
	d, err := untrusted.OpenDir(s.dir)
	if err != nil {
		return // the zygote's run dir is gone, and the files with it
	}
	defer d.Close()
	s.removeAllLocked(d)
}

// removeAllLocked removes every file (and empty directory) in d, the
// secrets dir, not following any.
func (s *secretFiles) removeAllLocked(d *untrusted.Dir) {
	names, _ := d.Names(maxSecretFiles)
	for _, n := range names {
		_ = d.Remove(n)
	}
}

// secretValues decrypts the function's secrets for one request.
func (m *Manager) secretValues(ctx context.Context, names []string) (map[string][]byte, error) {
	if len(names) == 0 {
		return nil, nil
	}
	if m.secrets == nil {
		return nil, fmt.Errorf("secrets are not configured in this daemon")
	}
	out := make(map[string][]byte, len(names))
	for _, n := range names {
		v, err := m.secrets.Value(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("reading secret %q: %w", n, err)
		}
		out[n] = v
	}
	return out, nil
}

// redactResult scrubs secret values from a request's error before it
// reaches the logs or the caller's error message. Its output was redacted
// where it was read, over each whole stream (agentproc.Request.Redact).
func redactResult(res *agentproc.Result, r *redact.Redactor) {
	if e := res.Error; e != nil && r != nil {
		e.Message, e.Traceback, e.Type = r.String(e.Message), r.String(e.Traceback), r.String(e.Type)
	}
}
