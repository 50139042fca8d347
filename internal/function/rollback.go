package function

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/zygo-run/zygo/internal/cleanup"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/store"
)

// VersionInfo is one stored version of a function, as `zygo versions`
// lists it.
type VersionInfo struct {
	Hash       string    // "sha256:<hex>"
	CreatedAt  time.Time // when it was first stored
	DeployedAt time.Time // when it was last made active (store.Version.DeployedAt)
	Active     bool      // it is the function's active version
}

// Versions lists function name's stored versions, the most recently
// deployed first (the order `zygo rollback` looks back in). Versions past
// Config.KeepVersions are collected after each deploy and are not listed.
// Errors: errdefs.ErrNotFound when no function of that name is deployed.
func (m *Manager) Versions(ctx context.Context, name string) ([]VersionInfo, error) {
	rec, err := m.reg.Function(ctx, name)
	if err != nil {
		return nil, err
	}
	vs, err := m.reg.Versions(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make([]VersionInfo, 0, len(vs))
	for _, v := range vs {
		out = append(out, VersionInfo{Hash: v.Hash, CreatedAt: v.CreatedAt, DeployedAt: v.DeployedAt, Active: v.Hash == rec.Active.Hash})
	}
	return out, nil
}

// hashPrefixRE is what Rollback's to accepts: a version hash or a prefix
// of one, with or without its "sha256:".
var hashPrefixRE = regexp.MustCompile(`^(sha256:)?[0-9a-f]{1,64}$`)

// Rollback makes an earlier stored version of function name the active one
// the same way Deploy does (a new runtime started and warmed up before
// traffic moves, the current one drained; an import failure keeps the
// current version serving). to is that version's hash or a unique prefix
// of it (with or without "sha256:"); "" is the version that was active
// before the current one. Rolling back to the active version changes
// nothing (DeployResult.Unchanged). Steps are reported as Deploy's, from
// StepImporting. Errors: errdefs.ErrNotFound (no such function, or to
// matches none of its versions; the message names to),
// errdefs.ErrInvalidArgument (to is not a hash prefix, or matches several
// versions), errdefs.ErrFailedPrecondition (no earlier version; the
// version's files are gone), then Deploy's errors for the start itself.
func (m *Manager) Rollback(ctx context.Context, name, to string) (*DeployResult, error) {
	if to != "" && !hashPrefixRE.MatchString(to) {
		return nil, fmt.Errorf("%w: to: %q is not a version hash (sha256:HEX) or a prefix of one", errdefs.ErrInvalidArgument, to)
	}
	unlock := m.names.lock(name)
	defer unlock()
	cur := m.get(name)
	if cur == nil {
		return nil, fmt.Errorf("function %q: %w", name, errdefs.ErrNotFound)
	}
	vs, err := m.reg.Versions(ctx, name)
	if err != nil {
		return nil, err
	}
	v, err := pickVersion(name, cur.version, to, vs)
	if err != nil {
		return nil, err
	}
	if v.Hash == cur.version {
		return cur.result(true), nil
	}
	var man Manifest
	if err := json.Unmarshal(v.Manifest, &man); err != nil {
		return nil, fmt.Errorf("rolling %q back to %s: reading its stored manifest: %w", name, v.Hash, err)
	}
	if err := m.checkDeployable(ctx, &man); err != nil {
		return nil, fmt.Errorf("rolling %q back to %s: %w", name, v.Hash, err)
	}
	codeDir := m.versionDir(name, v.Hash)
	if _, err := os.Stat(codeDir); err != nil {
		return nil, fmt.Errorf("%w: rolling %q back to %s: its files are gone (%v); deploy it again",
			errdefs.ErrFailedPrecondition, name, v.Hash, err) //nolint:errorlint // one category on purpose: the call's, not the stat's
	}
	uid, err := m.hostID(ctx, name)
	if err != nil {
		return nil, err
	}
	var undo cleanup.Stack
	defer func() { _ = undo.Run(ctx, 0) }()
	res, err := m.rollout(ctx, &undo, cur, m.newDeployment(name, v.Hash, &man, codeDir, uid))
	if err != nil {
		return nil, err
	}
	undo.Release()
	m.appendLogs(ctx, m.get(name).zygoLines("rolled back from "+cur.version+" to "+v.Hash))
	return res, nil
}

// pickVersion returns the version of vs (most recently deployed first) that
// to names, or for "" the most recent one that is not active.
func pickVersion(name, active, to string, vs []store.Version) (store.Version, error) {
	if to == "" {
		for _, v := range vs {
			if v.Hash != active {
				return v, nil
			}
		}
		return store.Version{}, fmt.Errorf("%w: function %q has no earlier version to roll back to (see `zygo versions %s`)",
			errdefs.ErrFailedPrecondition, name, name)
	}
	prefix := to
	if !strings.HasPrefix(prefix, "sha256:") {
		prefix = "sha256:" + prefix
	}
	var found []store.Version
	for _, v := range vs {
		if strings.HasPrefix(v.Hash, prefix) {
			found = append(found, v)
		}
	}
	switch len(found) {
	case 0:
		return store.Version{}, fmt.Errorf("%w: to: %q matches no version of function %q (see `zygo versions %s`)",
			errdefs.ErrNotFound, to, name, name)
	case 1:
		return found[0], nil
	}
	return store.Version{}, fmt.Errorf("%w: to: %q matches %d versions of function %q; give more of the hash",
		errdefs.ErrInvalidArgument, to, len(found), name)
}
