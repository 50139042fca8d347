package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// ErrPaused ends the calls waiting on a sandbox that Pause stops. It wraps
// errdefs.ErrFailedPrecondition.
var ErrPaused = fmt.Errorf("paused while the call was waiting: %w", errdefs.ErrFailedPrecondition)

// PauseTag is the tag of the checkpoints Pause takes (pause images). They belong to their
// sandbox: Pause drops the previous one once the new one is saved, and Remove drops them all,
// so only the image a paused sandbox needs outlives it. Checkpoints of any other tag are kept.
const PauseTag = "pause"

// Pause checkpoints the sandbox (tag PauseTag) and stops it: its engine instance is destroyed,
// so a paused sandbox holds no CPU or memory, only its image, which its record names
// (CheckpointID) and which therefore cannot be removed while it is paused. Its deadline is
// cleared (Resume sets a new one). The sandbox's previous pause image, if any, is removed. It waits for the calls in flight as Checkpoint does. It
// returns the record as saved (Paused), or an error wrapping errdefs.ErrNotFound for an unknown
// sandbox and errdefs.ErrFailedPrecondition for one that is not Running (a paused one
// included); on error the sandbox is as it was.
func (m *Manager) Pause(ctx context.Context, idOrName string) (SandboxRecord, error) {
	rec, err := m.get(ctx, idOrName)
	if err != nil {
		return SandboxRecord{}, err
	}
	if rec.State == Paused {
		return rec, fmt.Errorf("sandbox %s is already paused: %w", rec.ID, errdefs.ErrFailedPrecondition)
	}
	be, ck, err := m.bes.checkpointer(rec.Backend)
	if err != nil {
		return rec, err
	}
	c, err := m.begin(ctx, rec.ID, false, m.cfg.BusyWait)
	if err != nil {
		return rec, err
	}
	cp, err := m.checkpointLocked(c.ctx, ck, &c.rec, c.e, PauseTag)
	if err != nil {
		return c.rec, c.end(err)
	}
	next := c.rec
	next.CheckpointID = cp.ID
	next.Options.Lifecycle.ExpiresAt = time.Time{}
	if err := m.settle(c.ctx, &next, Paused, nil); err != nil {
		return c.rec, c.end(fmt.Errorf("pausing sandbox %s: %w", rec.ID, err))
	}
	// From here the record says Paused: the instance goes, whatever happens to the caller.
	c.e.cancel(fmt.Errorf("sandbox %s: %w", rec.ID, ErrPaused))
	m.dropLive(c.e)
	m.closePorts(rec.ID)
	_ = c.end(nil)
	if err := m.destroyEngine(context.WithoutCancel(ctx), be, next.EngineID); err != nil {
		m.log.Error("destroying the instance of a paused sandbox", "sandbox_id", rec.ID, "engine_id", next.EngineID, "err", err)
	}
	m.dropPauseImages(context.WithoutCancel(ctx), rec.ID, cp.ID)
	m.log.Info("paused sandbox", "sandbox_id", rec.ID, "checkpoint", cp.ID)
	return next, nil
}

// Resume restores a paused sandbox from its pause image under a new engine instance, reseals
// it (a new generation, hostname, machine-id: it is a copy in time, as a rollback is) and
// marks it Running, keeping its id and name. timeout, when positive, replaces the sandbox's
// Lifecycle.Timeout; the deadline is counted from now. On error the sandbox stays Paused and
// nothing of the new instance is left. Errors: errdefs.ErrNotFound for an unknown sandbox,
// errdefs.ErrFailedPrecondition for one that is not Paused, or whose image is lost or
// corrupted. A call that finds another resuming the sandbox waits for it (bounded by ctx)
// and, when the sandbox then runs, returns its record as that call left it.
func (m *Manager) Resume(ctx context.Context, idOrName string, timeout time.Duration) (SandboxRecord, error) {
	if timeout < 0 || timeout > MaxTimeout {
		return SandboxRecord{}, invalid("timeout", "%s: must be from 0 (keep the sandbox's) to %s", timeout, MaxTimeout)
	}
	rec, err := m.get(ctx, idOrName)
	if err != nil {
		return SandboxRecord{}, err
	}
	if m.isRecovering(rec.ID) {
		return rec, fmt.Errorf("sandbox %s is %w", rec.ID, ErrRecovering)
	}
	m.resumeMu.Lock()
	busy, waited := m.resuming[rec.ID], false
	for busy != nil {
		// Another call is resuming it: wait for it and answer as it did (E2B's connect is
		// idempotent), from the record it left.
		m.resumeMu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return rec, fmt.Errorf("waiting for another call resuming sandbox %s: %w", rec.ID, ctx.Err())
		}
		waited = true
		m.resumeMu.Lock()
		busy = m.resuming[rec.ID]
	}
	done := make(chan struct{})
	m.resuming[rec.ID] = done
	m.resumeMu.Unlock()
	defer func() {
		m.resumeMu.Lock()
		delete(m.resuming, rec.ID)
		m.resumeMu.Unlock()
		close(done)
	}()
	if rec, err = m.reg.GetSandbox(ctx, rec.ID); err != nil { // the state may have moved meanwhile
		return rec, err
	}
	if waited && rec.State == Running {
		return rec, nil // resumed by the call waited for
	}
	if rec.State != Paused {
		return rec, fmt.Errorf("sandbox %s is %s: only a paused sandbox resumes: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	cp, err := m.getCheckpoint(ctx, rec.CheckpointID)
	if err != nil {
		return rec, fmt.Errorf("resuming sandbox %s: its pause image: %w", rec.ID, err)
	}
	be, ck, err := m.bes.restorer(cp, rec.Backend)
	if err != nil {
		return rec, fmt.Errorf("resuming sandbox %s: %w", rec.ID, err)
	}
	release, err := m.leaseCheckpoint(ctx, cp)
	if err != nil {
		return rec, err
	}
	defer release()
	if err := m.verifyImage(ctx, cp); err != nil {
		return rec, err
	}
	if err := m.setState(ctx, &rec, Resuming, nil); err != nil {
		return rec, err
	}
	next := rec
	next.EngineID = newEngineID(rec.ID)
	inst, err := m.restoreInPlace(ctx, be, ck, &next, cp)
	if err != nil {
		return m.abortResume(ctx, rec, fmt.Errorf("resuming sandbox %s from %s: %w", rec.ID, cp.ID, err))
	}
	next.CheckpointID = cp.ID
	if timeout > 0 {
		next.Options.Lifecycle.Timeout = timeout
	}
	next.Options.Lifecycle = next.Options.Lifecycle.started(m.cfg.Now())
	if err := m.settle(ctx, &next, Running, nil); err != nil {
		if derr := m.destroyEngine(context.WithoutCancel(ctx), be, inst.ID); derr != nil {
			m.log.Error("destroying the copy of a failed resume", "sandbox_id", rec.ID, "engine_id", inst.ID, "err", derr)
		}
		return m.abortResume(ctx, rec, fmt.Errorf("resuming sandbox %s: %w", rec.ID, err))
	}
	m.addLive(next.ID, be, inst)
	m.log.Info("resumed sandbox", "sandbox_id", rec.ID, "checkpoint", cp.ID, "generation", next.Generation)
	return next, nil
}

// abortResume puts a sandbox whose resume failed back to Paused and returns cause.
func (m *Manager) abortResume(ctx context.Context, rec SandboxRecord, cause error) (SandboxRecord, error) {
	if err := m.settle(ctx, &rec, Paused, nil); err != nil {
		m.log.Error("saving a sandbox as paused after a failed resume", "sandbox_id", rec.ID, "err", err)
		return rec, fmt.Errorf("%w; and saving it as paused again: %w", cause, err)
	}
	return rec, cause
}

// RestoreOptions configure Restore.
type RestoreOptions struct {
	// Lifecycle is the new sandbox's timeout (counted from when it runs); zero: none.
	Lifecycle Lifecycle
	// Metadata replaces the checkpoint's sandbox's metadata when not nil.
	Metadata map[string]string
	// Template names what the sandbox is made from in listings ("" keeps the checkpoint's).
	Template string
	// Name is the new sandbox's name: valid as a create's (ValidateName) and not in use
	// (errdefs.ErrExists), checked before anything is made. Empty: named as below.
	Name string
}

// Restore makes a new sandbox from a checkpoint, which may have outlived the sandbox it was
// taken of: restored and resealed as a fork child is (its own id, generation, hostname,
// machine-id, host uid and network address), its parent the checkpoint's sandbox, its name
// that sandbox's name and a dash and 8 digits of its id (or opts.Name). The image is verified first. It
// returns the new record, or an error wrapping errdefs.ErrNotFound for an unknown checkpoint,
// errdefs.ErrInvalidArgument for bad options, errdefs.ErrFailedPrecondition for an image that
// is lost or corrupted; on error nothing of the new sandbox is left.
func (m *Manager) Restore(ctx context.Context, checkpoint string, opts RestoreOptions) (SandboxRecord, error) {
	if err := ValidateCheckpointRef("checkpoint", checkpoint); err != nil {
		return SandboxRecord{}, err
	}
	if err := validateLifecycle(opts.Lifecycle); err != nil {
		return SandboxRecord{}, err
	}
	if err := validateMetadata(opts.Metadata); err != nil {
		return SandboxRecord{}, err
	}
	if err := ValidateName(opts.Name); err != nil {
		return SandboxRecord{}, err
	}
	cp, err := m.getCheckpoint(ctx, checkpoint)
	if err != nil {
		return SandboxRecord{}, err
	}
	be, ck, err := m.bes.restorer(cp, cp.Backend)
	if err != nil {
		return SandboxRecord{}, fmt.Errorf("restoring %s: %w", cp.ID, err)
	}
	release, err := m.leaseCheckpoint(ctx, cp)
	if err != nil {
		return SandboxRecord{}, err
	}
	defer release()
	if opts.Name != "" {
		if err := m.namesFree(ctx, []string{opts.Name}, func(int) string { return "name" }); err != nil {
			return SandboxRecord{}, err
		}
	}
	if err := m.verifyImage(ctx, cp); err != nil {
		return SandboxRecord{}, err
	}
	if opts.Metadata != nil {
		cp.Options.Metadata = opts.Metadata
	}
	if opts.Template != "" {
		cp.Options.Template = opts.Template
	}
	parent := SandboxRecord{ID: cp.SandboxID, Name: cp.Options.Name}
	if parent.Name == "" {
		parent.Name = "restored"
	}
	s := m.restoreChild(ctx, be, ck, parent, cp, opts.Name)
	child := m.finishChild(ctx, s, opts.Lifecycle)
	if child.Err != nil {
		return SandboxRecord{}, fmt.Errorf("restoring checkpoint %s: %w", cp.ID, child.Err)
	}
	m.log.Info("restored checkpoint into a new sandbox", "checkpoint", cp.ID, "sandbox_id", child.Sandbox.ID)
	return child.Sandbox, nil
}

// dropPauseImages removes the pause images (PauseTag) taken of sandbox id except keep ("" for
// none): the one place a pause image ends, called by Pause (the image it replaces) and Remove
// (all). An image still referenced (a sandbox restored from it) or in use is kept, logged.
func (m *Manager) dropPauseImages(ctx context.Context, id, keep string) {
	cps, err := m.reg.ListCheckpoints(ctx)
	if err != nil {
		m.log.Warn("listing checkpoints to drop the pause images of a sandbox", "sandbox_id", id, "err", err)
		return
	}
	for _, cp := range cps {
		if cp.SandboxID != id || cp.Tag != PauseTag || cp.ID == keep {
			continue
		}
		// A later pause image of the same sandbox names this one its parent (the sandbox was
		// resumed from it); images are whole, so that lineage does not hold it.
		samePause := func(c CheckpointRecord) bool { return c.SandboxID == id && c.Tag == PauseTag }
		if err := m.removeCheckpoint(ctx, cp, samePause); err != nil && !errdefs.IsNotFound(err) {
			m.log.Info("keeping a pause image", "sandbox_id", id, "checkpoint", cp.ID, "err", err)
		}
	}
}
