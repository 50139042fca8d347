package function

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// nameLocks holds one mutex per function name, so that deploying or
// removing one function never waits for another's import or stop. Entries
// are dropped when no one holds or waits for them.
type nameLocks struct {
	mu sync.Mutex // guards m
	m  map[string]*nameLock
}

type nameLock struct {
	mu   sync.Mutex
	refs int // holders and waiters; guarded by nameLocks.mu
}

// lock locks name and returns the function that unlocks it.
func (l *nameLocks) lock(name string) (unlock func()) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*nameLock{}
	}
	nl := l.m[name]
	if nl == nil {
		nl = &nameLock{}
		l.m[name] = nl
	}
	nl.refs++
	l.mu.Unlock()
	nl.mu.Lock()
	return func() {
		nl.mu.Unlock()
		l.mu.Lock()
		if nl.refs--; nl.refs == 0 {
			delete(l.m, name)
		}
		l.mu.Unlock()
	}
}

// newDeployment returns a deployment of version and counts its code
// directory as in use until the deployment has fully stopped.
func (m *Manager) newDeployment(name, version string, man *Manifest, codeDir string, uid uint32) *deployment {
	m.mu.Lock()
	m.inUse[codeDir]++
	m.mu.Unlock()
	return newDeployment(m, name, version, man, codeDir, uid)
}

// releaseDir is called once per deployment, when it has fully stopped.
func (m *Manager) releaseDir(codeDir string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inUse[codeDir]--; m.inUse[codeDir] <= 0 {
		delete(m.inUse, codeDir)
	}
}

func (m *Manager) dirInUse(codeDir string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inUse[codeDir] > 0
}

// storeVersionDir writes u's files to codeDir unless it exists; created
// says whether this call made it (and so owns removing it on failure).
func storeVersionDir(u *Unpacked, codeDir string) (created bool, err error) {
	if _, err := os.Stat(codeDir); err == nil {
		return false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("storing version: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(codeDir), 0o755); err != nil {
		return false, fmt.Errorf("storing version: %w", err)
	}
	if err := u.WriteTo(codeDir); err != nil {
		os.Remove(filepath.Dir(codeDir)) // only if empty
		return false, err
	}
	return true, nil
}

// removeVersionDir deletes one version's code directory (the daemon wrote
// it; the sandbox only ever binds it read-only) and the function's versions
// directory if that leaves it empty.
func (m *Manager) removeVersionDir(name, codeDir string) {
	if err := os.RemoveAll(codeDir); err != nil {
		m.log.Warn("removing version directory", "function", name, "err", err)
	}
	_ = os.Remove(m.versionsRoot(name)) // fails, harmlessly, unless empty
}

// collectVersionsLocked deletes the stored versions of name that are
// neither active, nor among the Config.KeepVersions - 1 most recently
// deployed superseded ones, nor run by a deployment that has not fully stopped (a draining
// version is collected by the retire that ends it). The caller holds the
// name's lock. Failures are logged: collection is retried after the next
// deploy.
func (m *Manager) collectVersionsLocked(ctx context.Context, name string) {
	vs, err := m.reg.Versions(ctx, name)
	if err != nil {
		m.log.Warn("listing versions to collect", "function", name, "err", err)
		return
	}
	active := ""
	if rec, err := m.reg.Function(ctx, name); err == nil {
		active = rec.Active.Hash
	}
	kept := 0
	for _, v := range vs {
		if v.Hash == active {
			continue
		}
		if kept < m.cfg.KeepVersions-1 {
			kept++
			continue
		}
		dir := m.versionDir(name, v.Hash)
		if m.dirInUse(dir) {
			continue
		}
		if err := m.reg.DeleteVersion(ctx, name, v.Hash); err != nil {
			m.log.Warn("collecting a superseded version", "function", name, "version", v.Hash, "err", err)
			continue
		}
		m.removeVersionDir(name, dir)
	}
}

// removedPrefix names a function's versions directory moved aside by
// Remove, to be deleted once its zygote has stopped.
const removedPrefix = ".removed-"

// detachVersions moves name's versions directory aside (an atomic rename
// under the name's lock, so a new deploy of the name starts clean) and
// returns where it went; moved is false when there was none.
func (m *Manager) detachVersions(name string) (trash string, moved bool) {
	root := m.versionsRoot(name)
	trash = filepath.Join(m.cfg.StateDir, "versions", removedPrefix+newID(name))
	if err := os.Rename(root, trash); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			m.log.Warn("detaching versions", "function", name, "err", err)
		}
		return "", false
	}
	return trash, true
}

// sweepRemoved deletes versions directories a Remove moved aside but did
// not get to delete (the daemon stopped in between).
func (m *Manager) sweepRemoved() {
	root := filepath.Join(m.cfg.StateDir, "versions")
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), removedPrefix) {
			_ = os.RemoveAll(filepath.Join(root, e.Name()))
		}
	}
}
