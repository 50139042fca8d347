package sandbox

// Checkpoint leases: how a checkpoints rm and the forks and rollbacks reading an image keep out
// of each other's way without a lock held across I/O.
//
// A fork (with or without --from) and a rollback take a lease on their checkpoint before they
// verify its image and hold it until every copy they restore has its record written (naming
// the checkpoint, which then keeps it from removal by reference). RemoveCheckpoint marks the
// checkpoint as being removed only while it has no lease, so a lease and a removal exclude
// each other: a new lease on a checkpoint being removed fails (ErrNotFound: it is going), and
// an rm of a leased checkpoint is refused (ErrFailedPrecondition, 409: retry when the fork or
// rollback is done). Only ckMu is taken, and only around map updates: the registry reads, the
// record's deletion and the image's deletion all run outside every Manager lock, so a large
// image stalls nobody but the rm that deletes it.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// leaseKind is what a lease is taken for, which an rm refused because of it names.
type leaseKind int

const (
	leaseRestore leaseKind = iota // a fork, rollback, resume or restore
	leaseExport                   // an export (ExportCheckpoint), until the caller closes it
)

// leaseCounts counts the leases on one checkpoint, by kind.
type leaseCounts [2]int

func (c *leaseCounts) total() int { return c[leaseRestore] + c[leaseExport] }

// leaseCheckpoint takes a lease on cp for a fork or rollback that is about to read its image;
// the caller calls the returned release once the copies it made have their records (it is
// safe to call more than once). It returns an error wrapping errdefs.ErrNotFound when cp is
// being removed or was removed since the caller looked it up.
func (m *Manager) leaseCheckpoint(ctx context.Context, cp CheckpointRecord) (release func(), err error) {
	return m.leaseCheckpointFor(ctx, cp, leaseRestore)
}

// leaseCheckpointFor is leaseCheckpoint for a call of that kind.
func (m *Manager) leaseCheckpointFor(ctx context.Context, cp CheckpointRecord, kind leaseKind) (release func(), err error) {
	m.ckMu.Lock()
	if m.ckRemoving[cp.ID] {
		m.ckMu.Unlock()
		return nil, fmt.Errorf("checkpoint %s is being removed: %w", cp.ID, errdefs.ErrNotFound)
	}
	c := m.ckLeases[cp.ID]
	if c == nil {
		c = &leaseCounts{}
		m.ckLeases[cp.ID] = c
	}
	c[kind]++
	m.ckMu.Unlock()
	release = sync.OnceFunc(func() {
		m.ckMu.Lock()
		defer m.ckMu.Unlock()
		if c[kind]--; c.total() <= 0 {
			delete(m.ckLeases, cp.ID)
		}
	})
	// An rm that finished between the caller's lookup and the lease has deleted the record.
	if _, err := m.reg.GetCheckpoint(ctx, cp.ID); err != nil {
		release()
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("checkpoint %s was removed: %w", cp.ID, errdefs.ErrNotFound)
		}
		return nil, fmt.Errorf("reading checkpoint %s: %w", cp.ID, err)
	}
	return release, nil
}

// markRemoving marks checkpoint id as being removed, so that no new lease is given on it. It
// returns an error wrapping errdefs.ErrFailedPrecondition, naming the calls, when a fork,
// rollback or export holds a lease on it or another rm is removing it; unmark with
// unmarkRemoving.
func (m *Manager) markRemoving(id string) error {
	m.ckMu.Lock()
	defer m.ckMu.Unlock()
	if c := m.ckLeases[id]; c != nil && c.total() > 0 {
		var who []string
		if n := c[leaseRestore]; n > 0 {
			who = append(who, fmt.Sprintf("%d fork, rollback or restore call(s)", n))
		}
		if n := c[leaseExport]; n > 0 {
			who = append(who, fmt.Sprintf("%d export(s) (GET /v1/checkpoints/%s/image, ended when the reader has read it "+
				"or stops reading for %s)", n, id, ExportStallTimeout))
		}
		return fmt.Errorf("checkpoint %s is being read by %s in progress; retry when they are done: %w",
			id, strings.Join(who, " and "), errdefs.ErrFailedPrecondition)
	}
	if m.ckRemoving[id] {
		return fmt.Errorf("checkpoint %s is already being removed: %w", id, errdefs.ErrFailedPrecondition)
	}
	m.ckRemoving[id] = true
	return nil
}

func (m *Manager) unmarkRemoving(id string) {
	m.ckMu.Lock()
	delete(m.ckRemoving, id)
	m.ckMu.Unlock()
}

// RemoveCheckpoint deletes a checkpoint's record, then its image, and returns once both are
// gone. It refuses, with an error wrapping errdefs.ErrFailedPrecondition that names them,
// while a sandbox was restored from it or a checkpoint descends from it, and while a fork or
// rollback is reading it (see the lease comment above). No Manager lock is held meanwhile:
// other calls go on while a large image is deleted. The deletion runs on the caller's request
// so its outcome is the answer; when it fails the record is already gone (the checkpoint can
// no longer be used), the error says so, and the next daemon start deletes what is left
// (removeStrayImages). Errors never carry the image's host path.
func (m *Manager) RemoveCheckpoint(ctx context.Context, idOrTag string) error {
	if err := ValidateCheckpointRef("checkpoint", idOrTag); err != nil {
		return err
	}
	cp, err := m.GetCheckpoint(ctx, idOrTag)
	if err != nil {
		return err
	}
	return m.removeCheckpoint(ctx, cp, nil)
}

// removeCheckpoint is RemoveCheckpoint of cp, where a checkpoint taken of a sandbox restored
// from cp does not hold it when besides(that checkpoint) is true (nil: every one holds it).
func (m *Manager) removeCheckpoint(ctx context.Context, cp CheckpointRecord, besides func(CheckpointRecord) bool) error {
	if err := m.markRemoving(cp.ID); err != nil {
		return err
	}
	defer m.unmarkRemoving(cp.ID)
	refs, err := m.checkpointRefs(ctx, cp.ID, besides)
	if err != nil {
		return err
	}
	if len(refs) > 0 {
		return fmt.Errorf("checkpoint %s is still referenced by %s: %w", cp.ID, strings.Join(refs, ", "), errdefs.ErrFailedPrecondition)
	}
	if err := m.reg.DeleteCheckpoint(ctx, cp.ID); err != nil {
		return fmt.Errorf("deleting checkpoint record %s: %w", cp.ID, err)
	}
	if err := m.removeImage(cp.Dir); err != nil {
		m.log.Error("deleting checkpoint image", "checkpoint", cp.ID, "dir", cp.Dir, "err", err)
		return fmt.Errorf("checkpoint %s is removed, but deleting its image failed (%s); the next daemon start deletes it",
			cp.ID, errnoText(err))
	}
	m.log.Info("removed checkpoint", "checkpoint", cp.ID, "bytes", cp.SizeBytes)
	return nil
}

// checkpointRefs returns what refers to checkpoint id: "sandbox ID" for each sandbox restored
// from it, "checkpoint ID" for each checkpoint taken of such a sandbox.
func (m *Manager) checkpointRefs(ctx context.Context, id string, besides func(CheckpointRecord) bool) ([]string, error) {
	var refs []string
	sbs, err := m.reg.ListSandboxes(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	for _, s := range sbs {
		if s.CheckpointID == id {
			refs = append(refs, "sandbox "+s.ID)
		}
	}
	cps, err := m.reg.ListCheckpoints(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing checkpoints: %w", err)
	}
	for _, c := range cps {
		if c.ParentID == id && (besides == nil || !besides(c)) {
			refs = append(refs, "checkpoint "+c.ID)
		}
	}
	return refs, nil
}

// errnoText returns the reason of a file error without its path (an *os.PathError's Err), for
// messages that go to API callers.
func errnoText(err error) string {
	if pe := (*os.PathError)(nil); errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	if le := (*os.LinkError)(nil); errors.As(err, &le) {
		return le.Op + ": " + le.Err.Error()
	}
	return "an I/O error"
}
