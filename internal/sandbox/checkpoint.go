package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/cleanup"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
)

// Checkpoint saves an immutable image of the running sandbox, which keeps running, and
// returns its record. A checkpoint cuts the guest's connection, which would kill an exec
// half-way, so it waits for the sandbox's calls in flight — at most ManagerConfig.BusyWait,
// holding new calls back meanwhile — and then fails with errdefs.ErrFailedPrecondition
// naming how many are still in flight. rm ends it (ErrRemoved). On error no image and no
// record are left and the source is still Running.
func (m *Manager) Checkpoint(ctx context.Context, idOrName, tag string) (CheckpointRecord, error) {
	if err := ValidateTag(tag); err != nil {
		return CheckpointRecord{}, err
	}
	rec, err := m.get(ctx, idOrName)
	if err != nil {
		return CheckpointRecord{}, err
	}
	_, ck, err := m.bes.checkpointer(rec.Backend) // its own backend writes its image
	if err != nil {
		return CheckpointRecord{}, err
	}
	c, err := m.begin(ctx, rec.ID, false, m.cfg.BusyWait)
	if err != nil {
		return CheckpointRecord{}, err
	}
	cp, err := m.checkpointLocked(c.ctx, ck, &c.rec, c.e, tag)
	return cp, c.end(err)
}

// checkpointLocked takes the checkpoint with e held exclusively. Every failure — the engine's
// (a full disk, the guest not coming back), the store's (the record or the source's state not
// saved) or ctx ending — runs the undo stack: the image dir is removed, the record deleted,
// and the source goes back to Running.
func (m *Manager) checkpointLocked(ctx context.Context, ck Checkpointer, rec *SandboxRecord, e *entry, tag string) (_ CheckpointRecord, err error) {
	if err := m.setState(ctx, rec, Checkpointing, nil); err != nil {
		return CheckpointRecord{}, err
	}
	var undo cleanup.Stack
	defer func() {
		if err == nil {
			return
		}
		if uerr := undo.Run(ctx, 0); uerr != nil {
			m.log.Error("cleaning up failed checkpoint", "sandbox_id", rec.ID, "err", uerr)
		}
		err = fmt.Errorf("checkpointing sandbox %s: %w", rec.ID, err)
	}()
	undo.Add(func(ctx context.Context) error {
		if rec.State == Running {
			return nil
		}
		return m.setState(ctx, rec, Running, nil)
	})
	cp := CheckpointRecord{ID: newID("cp-", 8), Tag: tag, SandboxID: rec.ID, ParentID: rec.CheckpointID,
		Backend: rec.Backend, Token: rec.Token, Generation: rec.Generation, Options: rec.Options}
	dir, err := m.imageDirFor(rec.Options)
	if err != nil {
		return CheckpointRecord{}, err
	}
	cp.Dir = filepath.Join(dir, cp.ID)
	// The Manager owns cp.Dir from here on: a backend that failed after writing it (the image
	// complete, the guest not back) must not leave it behind.
	undo.Add(func(context.Context) error { return os.RemoveAll(cp.Dir) })
	// ReadyTimeout bounds the engine's step, the guest's reconnect included: a guest that
	// never dials back must not hold the caller (and the sandbox's lock) forever.
	cctx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	err = ck.Checkpoint(cctx, e.instance().ID, cp.Dir)
	cancel()
	if err != nil {
		return CheckpointRecord{}, err
	}
	if err := ctx.Err(); err != nil { // the caller gave up: it would never learn the id
		return CheckpointRecord{}, err
	}
	cp.CreatedAt = m.cfg.Now()
	if cp.Checksums, cp.SizeBytes, err = checksumImage(cp.Dir); err != nil {
		return CheckpointRecord{}, err
	}
	if err := m.reg.PutCheckpoint(ctx, cp); err != nil {
		return CheckpointRecord{}, fmt.Errorf("saving checkpoint %s: %w", cp.ID, err)
	}
	undo.Add(func(ctx context.Context) error {
		if err := m.reg.DeleteCheckpoint(ctx, cp.ID); err != nil && !errdefs.IsNotFound(err) {
			return err
		}
		return nil
	})
	if err := m.setState(ctx, rec, Running, nil); err != nil {
		return CheckpointRecord{}, err
	}
	undo.Release()
	m.log.Info("checkpointed", "sandbox_id", rec.ID, "checkpoint", cp.ID, "bytes", cp.SizeBytes)
	return cp, nil
}

// Checkpoints returns the checkpoint records, oldest first: all of them when sandboxID is
// empty, else those taken of that sandbox (an id or name). A removed sandbox's id still
// lists the checkpoints taken of it. It returns an error wrapping errdefs.ErrNotFound when
// sandboxID names no sandbox and no checkpoint was taken of a sandbox with that id, so a
// misspelt name is an error rather than an empty list.
func (m *Manager) Checkpoints(ctx context.Context, sandboxID string) ([]CheckpointRecord, error) {
	all, err := m.reg.ListCheckpoints(ctx)
	if err != nil || sandboxID == "" {
		return withLost(all), err
	}
	if err := validateSandboxRef(sandboxID); err != nil {
		return nil, err
	}
	rec, gerr := m.Get(ctx, sandboxID)
	switch {
	case gerr == nil:
		sandboxID = rec.ID
	case !errdefs.IsNotFound(gerr):
		return nil, gerr
	}
	out := []CheckpointRecord{}
	for _, cp := range all {
		if cp.SandboxID == sandboxID {
			out = append(out, cp)
		}
	}
	if gerr != nil && len(out) == 0 {
		return nil, fmt.Errorf("sandbox %q: no such sandbox and no checkpoint of one: %w", sandboxID, errdefs.ErrNotFound)
	}
	return withLost(out), nil
}

// GetCheckpoint returns the checkpoint with that id or tag, or an error wrapping
// errdefs.ErrNotFound.
func (m *Manager) GetCheckpoint(ctx context.Context, idOrTag string) (CheckpointRecord, error) {
	if err := ValidateCheckpointRef("checkpoint", idOrTag); err != nil {
		return CheckpointRecord{}, err
	}
	cp, err := m.getCheckpoint(ctx, idOrTag)
	cp.Lost = err == nil && imageLost(cp)
	return cp, err
}

func (m *Manager) getCheckpoint(ctx context.Context, idOrTag string) (CheckpointRecord, error) {
	cp, err := m.reg.GetCheckpoint(ctx, idOrTag)
	if err == nil || !errdefs.IsNotFound(err) {
		return cp, err
	}
	all, lerr := m.reg.ListCheckpoints(ctx)
	if lerr != nil {
		return cp, lerr
	}
	for i := len(all) - 1; i >= 0; i-- { // the newest with that tag
		if all[i].Tag == idOrTag && idOrTag != "" {
			return all[i], nil
		}
	}
	return cp, err
}

// checkpointFor resolves idOrTag for a fork or rollback of sandbox rec and checks that the
// checkpoint belongs to rec's lineage (see docs/sandboxes.md): it was taken of rec itself or
// of one of the sandboxes rec descends from by fork. A tag resolves among rec's own
// checkpoints first, then among its lineage's, newest first. A checkpoint outside the lineage
// is refused with an error wrapping errdefs.ErrInvalidArgument that names it and its sandbox.
func (m *Manager) checkpointFor(ctx context.Context, rec SandboxRecord, idOrTag string) (CheckpointRecord, error) {
	all, err := m.reg.ListCheckpoints(ctx)
	if err != nil {
		return CheckpointRecord{}, fmt.Errorf("listing checkpoints: %w", err)
	}
	lineage, err := m.lineage(ctx, rec, all)
	if err != nil {
		return CheckpointRecord{}, err
	}
	cp, err := m.reg.GetCheckpoint(ctx, idOrTag) // an exact id wins
	if err != nil && !errdefs.IsNotFound(err) {
		return CheckpointRecord{}, err
	}
	if err != nil && idOrTag != "" {
		found := false
		for _, own := range []bool{true, false} { // own checkpoints first, then the lineage's
			for i := len(all) - 1; i >= 0 && !found; i-- {
				c := all[i]
				if c.Tag == idOrTag && (c.SandboxID == rec.ID) == own && lineage[c.SandboxID] {
					cp, err, found = c, nil, true
				}
			}
		}
		if !found { // a tag only others use: resolve it to refuse it by name below
			for i := len(all) - 1; i >= 0 && !found; i-- {
				if all[i].Tag == idOrTag {
					cp, err, found = all[i], nil, true
				}
			}
		}
	}
	if err != nil {
		return CheckpointRecord{}, err
	}
	if !lineage[cp.SandboxID] {
		return CheckpointRecord{}, fmt.Errorf("checkpoint %s (tag %q) belongs to sandbox %s, which is not sandbox %s nor one it was forked from: %w",
			cp.ID, cp.Tag, cp.SandboxID, rec.ID, errdefs.ErrInvalidArgument)
	}
	return cp, nil
}

// lineage returns the ids of rec and of every sandbox it descends from by fork: the chain of
// ParentIDs, and, for ancestors whose records are gone, the sandboxes the checkpoints on
// rec's checkpoint chain were taken of.
func (m *Manager) lineage(ctx context.Context, rec SandboxRecord, all []CheckpointRecord) (map[string]bool, error) {
	ids := map[string]bool{rec.ID: true}
	for p := rec.ParentID; p != "" && !ids[p]; {
		ids[p] = true
		prec, err := m.reg.GetSandbox(ctx, p)
		if errdefs.IsNotFound(err) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading sandbox %s: %w", p, err)
		}
		p = prec.ParentID
	}
	byID := make(map[string]CheckpointRecord, len(all))
	for _, c := range all {
		byID[c.ID] = c
	}
	seen := map[string]bool{}
	for c := rec.CheckpointID; c != "" && !seen[c]; {
		seen[c] = true
		cp, ok := byID[c]
		if !ok {
			break
		}
		ids[cp.SandboxID] = true
		c = cp.ParentID
	}
	return ids, nil
}

// ForkOptions selects what to fork.
type ForkOptions struct {
	N int // children, 1..MaxFork()
	// From is the checkpoint (id or tag) to restore; empty means checkpoint the sandbox now.
	From string
	// Progress, when set, is called once the checkpoint is ready and again each time a child
	// has been restored and resealed or has failed, from the goroutine that did the work (calls
	// are serialized). It must not block.
	Progress func(ForkProgress)
	// Lifecycle is each child's own timeout (its Timeout counted from when the child runs);
	// zero: the children never end by themselves. The parent's deadline does not move.
	Lifecycle Lifecycle
	// Names, when set, are the children's names, Names[i] for child i: exactly N, each valid
	// as a create's name (ValidateName, not empty), all distinct and none in use. Checked
	// before anything is made: a bad one is errdefs.ErrInvalidArgument naming names[i], one in
	// use errdefs.ErrExists naming it. Empty: each child is named after its parent
	// (childName). A caller that names the children finds them again by name if the answer is
	// lost (the Kubernetes controller names them for its objects).
	Names []string
}

// ForkProgress is how far a Fork has got.
type ForkProgress struct {
	Checkpoint string `json:"checkpoint"` // the checkpoint restored
	N          int    `json:"n"`          // children asked for
	Ready      int    `json:"ready"`      // restored and resealed so far
	Failed     int    `json:"failed"`     // failed so far (each is destroyed)
}

// ForkChild is one child's outcome: a Running sandbox, or the error that destroyed it.
type ForkChild struct {
	Sandbox SandboxRecord `json:"sandbox"` // zero when Err is set
	Err     error         `json:"-"`
	Error   string        `json:"error,omitempty"` // Err as text, for the API
}

// ForkResult lists every child in order; partial success is normal and never hidden.
type ForkResult struct {
	Checkpoint CheckpointRecord `json:"checkpoint"`
	Children   []ForkChild      `json:"children"`
}

// Fork restores N children of the sandbox in parallel from a fresh checkpoint (or opts.From),
// reseals each and checks that siblings' entropy samples are pairwise distinct. It returns the
// result and a nil error when at least one child is Running; when none is, it returns the
// result and an error joining the children's. A bad N is an error wrapping
// errdefs.ErrInvalidArgument that states the bound.
func (m *Manager) Fork(ctx context.Context, idOrName string, opts ForkOptions) (ForkResult, error) {
	var res ForkResult
	if opts.N < 1 || opts.N > m.cfg.MaxForkN {
		return res, invalid("n", "%d: must be between 1 and %d", opts.N, m.cfg.MaxForkN)
	}
	if opts.From != "" {
		if err := ValidateCheckpointRef("from", opts.From); err != nil {
			return res, err
		}
	}
	if err := validateChildNames(opts.Names, opts.N); err != nil {
		return res, err
	}
	parent, err := m.get(ctx, idOrName)
	if err != nil {
		return res, err
	}
	if err := m.namesFree(ctx, opts.Names, func(i int) string { return fmt.Sprintf("names[%d]", i) }); err != nil {
		return res, err
	}
	if _, _, err := m.bes.checkpointer(parent.Backend); err != nil {
		return res, err
	}
	var release func()
	if res.Checkpoint, release, err = m.forkCheckpoint(ctx, parent, opts.From); err != nil {
		return res, err
	}
	defer release()
	// The children run on the parent's backend, which must be the one that wrote the image.
	be, ck, err := m.bes.restorer(res.Checkpoint, parent.Backend)
	if err != nil {
		return res, fmt.Errorf("forking %s: %w", parent.ID, err)
	}
	var pmu sync.Mutex // serializes Progress calls and guards prog
	prog := ForkProgress{Checkpoint: res.Checkpoint.ID, N: opts.N}
	report := func(s *staged) { // s: a finished child, or nil before the first
		if opts.Progress == nil {
			return
		}
		pmu.Lock()
		defer pmu.Unlock()
		switch {
		case s == nil:
		case s.err == nil:
			prog.Ready++
		default:
			prog.Failed++
		}
		opts.Progress(prog)
	}
	report(nil)
	staged := make([]*staged, opts.N)
	var wg sync.WaitGroup
	for i := range staged {
		wg.Go(func() {
			name := ""
			if opts.Names != nil {
				name = opts.Names[i]
			}
			staged[i] = m.restoreChild(ctx, be, ck, parent, res.Checkpoint, name)
			report(staged[i])
		})
	}
	wg.Wait()
	samples := make([][]byte, len(staged))
	for i, s := range staged {
		if s.err == nil {
			samples[i] = s.reseal.EntropySample
		}
	}
	dup := checkDistinct(samples)
	var errs []error
	for i, s := range staged {
		if s.err == nil && dup[i] != nil {
			s.err = dup[i]
		}
		res.Children = append(res.Children, m.finishChild(ctx, s, opts.Lifecycle))
		if s.err != nil {
			errs = append(errs, s.err)
		}
	}
	if len(errs) == len(staged) {
		return res, fmt.Errorf("forking %s: every child failed: %w", parent.ID, errors.Join(errs...))
	}
	return res, nil
}

// forkCheckpoint returns the checkpoint a fork of parent restores — a fresh one when from is
// empty, else from resolved in parent's lineage and its image verified — with a lease on it
// that keeps a checkpoints rm off the image until the caller releases it (once every child's
// record names the checkpoint).
func (m *Manager) forkCheckpoint(ctx context.Context, parent SandboxRecord, from string) (CheckpointRecord, func(), error) {
	var cp CheckpointRecord
	var err error
	if from == "" {
		cp, err = m.Checkpoint(ctx, parent.ID, "fork")
	} else {
		cp, err = m.checkpointFor(ctx, parent, from)
	}
	if err != nil {
		return cp, nil, err
	}
	release, err := m.leaseCheckpoint(ctx, cp)
	if err != nil {
		return cp, nil, err
	}
	if from != "" { // a fresh checkpoint's checksums were just taken from these very files
		if err := m.verifyImage(ctx, cp); err != nil { // once for all N children, before any is made
			release()
			return cp, nil, err
		}
	}
	return cp, release, nil
}

// staged is a child that was restored and resealed but is not Running yet.
type staged struct {
	rec    SandboxRecord
	be     Backend // the backend inst runs on
	inst   *Instance
	reseal guest.ResealResult
	err    error
	undo   cleanup.Stack
}

// validateChildNames checks ForkOptions.Names against n: none, or n valid distinct names.
func validateChildNames(names []string, n int) error {
	if names == nil {
		return nil
	}
	if len(names) != n {
		return invalid("names", "%d names for n=%d children: give one name per child, or none", len(names), n)
	}
	seen := make(map[string]int, n)
	for i, name := range names {
		field := fmt.Sprintf("names[%d]", i)
		if name == "" {
			return invalid(field, "empty: every child needs a name when names is given")
		}
		if err := ValidateName(name); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		if j, dup := seen[name]; dup {
			return invalid(field, "%q is names[%d] too: the names must be distinct", name, j)
		}
		seen[name] = i
	}
	return nil
}

// namesFree returns an error wrapping errdefs.ErrExists naming the first of names a sandbox
// already has (by name or id), as field(i). A create racing the fork may still take one: that child then
// fails alone (the registry refuses the duplicate).
func (m *Manager) namesFree(ctx context.Context, names []string, field func(i int) string) error {
	if len(names) == 0 {
		return nil
	}
	all, err := m.reg.ListSandboxes(ctx)
	if err != nil {
		return fmt.Errorf("listing sandboxes: %w", err)
	}
	for i, name := range names {
		for _, r := range all {
			if r.Name == name || r.ID == name {
				return fmt.Errorf("%s: a sandbox named %q (%s): %w", field(i), name, r.ID, errdefs.ErrExists)
			}
		}
	}
	return nil
}

// restoreChild restores one child and reseals it, leaving it Resealing (or failed, with its
// undo stack loaded). name is the child's name; empty: childName.
func (m *Manager) restoreChild(ctx context.Context, be Backend, ck Checkpointer, parent SandboxRecord, cp CheckpointRecord, name string) *staged {
	now := m.cfg.Now()
	s := &staged{be: be, rec: SandboxRecord{ID: newID("sb-", 8), Backend: be.Name(), State: Restoring,
		// No generation until the reseal issues one: until then the record must not show the
		// checkpoint's, which its siblings and its source hold too.
		ParentID: parent.ID, CheckpointID: cp.ID, Token: cp.Token,
		Options: cp.Options, CreatedAt: now, UpdatedAt: now}}
	s.rec.Name = name
	if name == "" {
		s.rec.Name = childName(parent.Name, s.rec.ID)
	}
	s.rec.Options.Name = s.rec.Name
	s.rec.Options.Lifecycle = Lifecycle{} // set by the caller (ForkOptions.Lifecycle) once it runs
	s.rec.EngineID = newEngineID(s.rec.ID)
	if s.err = m.checkRestoreRoot(cp); s.err != nil { // before anything is made for the child
		return s
	}
	if s.err = m.reg.PutSandbox(ctx, s.rec); s.err != nil {
		return s
	}
	s.undo.Add(func(ctx context.Context) error { return m.reg.DeleteSandbox(ctx, s.rec.ID) })
	var uid uint32
	if uid, s.err = m.hostUID(ctx, s.rec.ID); s.err != nil { // the child's own: it is a sandbox of its own
		return s
	}
	s.undo.Add(func(ctx context.Context) error { return m.releaseHostUID(ctx, s.rec.ID) })
	engineID := s.rec.EngineID
	s.undo.Add(func(ctx context.Context) error { return m.destroyEngine(ctx, be, engineID) })
	var netAt *NetAttachment
	if netAt, s.rec.Net, s.err = m.attachNet(ctx, engineID, cp.Options.Network); s.err != nil { // a new address and MAC
		return s
	}
	rctx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	defer cancel()
	spec := restoreSpec(cp, engineID, uid, netAt)
	s.inst, s.err = ck.Restore(rctx, cp.Dir, spec)
	if s.err != nil {
		s.err = fmt.Errorf("restoring %s from %s: %w", s.rec.ID, cp.ID, s.err)
		return s
	}
	if s.inst.ID != engineID {
		s.undo.Add(func(ctx context.Context) error { return m.destroyEngine(ctx, be, s.inst.ID) })
	}
	if s.err = m.setState(ctx, &s.rec, Resealing, nil); s.err != nil {
		return s
	}
	s.reseal, s.err = m.resealChild(ctx, be, &s.rec, cp, s.inst, spec.Hostname)
	return s
}

// childName is a fork child's name: its parent's, a dash and 8 digits of its id, with the
// parent's part cut so that the whole stays within ValidateName's 63 characters (names of
// grandchildren would otherwise grow 9 characters a generation).
func childName(parent, id string) string {
	suffix := "-" + id[3:11]
	return parent[:min(len(parent), maxNameLen-len(suffix))] + suffix
}

// finishChild marks a staged child Running, or runs its undo stack.
func (m *Manager) finishChild(ctx context.Context, s *staged, life Lifecycle) ForkChild {
	if s.err == nil {
		s.rec.Options.Lifecycle = life.started(m.cfg.Now())
		s.err = m.setState(ctx, &s.rec, Running, nil)
	}
	if s.err != nil {
		if uerr := s.undo.Run(ctx, 0); uerr != nil {
			m.log.Error("cleaning up failed fork child", "sandbox_id", s.rec.ID, "err", uerr)
		}
		m.log.Warn("fork child failed", "sandbox_id", s.rec.ID, "err", s.err)
		return ForkChild{Err: s.err, Error: s.err.Error()}
	}
	s.undo.Release()
	m.addLive(s.rec.ID, s.be, s.inst)
	return ForkChild{Sandbox: s.rec}
}

// Rollback replaces the sandbox's running instance with a restore of the checkpoint, keeping
// the sandbox's id and name, with a new generation (reseal runs as for a fork). The new
// instance is restored and resealed before the old one is destroyed: on error the sandbox
// keeps running as it was. Like Checkpoint it waits at most ManagerConfig.BusyWait for the
// calls in flight, and a corrupted image is refused (*CorruptImageError) before anything is
// touched.
func (m *Manager) Rollback(ctx context.Context, idOrName, checkpoint string) (SandboxRecord, error) {
	if err := ValidateCheckpointRef("to", checkpoint); err != nil {
		return SandboxRecord{}, err
	}
	target, err := m.get(ctx, idOrName)
	if err != nil {
		return SandboxRecord{}, err
	}
	if _, _, err := m.bes.checkpointer(target.Backend); err != nil {
		return target, err
	}
	cp, err := m.checkpointFor(ctx, target, checkpoint)
	if err != nil {
		return target, err
	}
	// The sandbox stays on its backend, which must be the one that wrote the image.
	be, ck, err := m.bes.restorer(cp, target.Backend)
	if err != nil {
		return target, fmt.Errorf("rolling back %s: %w", target.ID, err)
	}
	release, err := m.leaseCheckpoint(ctx, cp) // until the record names cp, or the rollback failed
	if err != nil {
		return target, err
	}
	defer release()
	if err := m.verifyImage(ctx, cp); err != nil { // before the sandbox is touched
		return target, err
	}
	c, err := m.begin(ctx, target.ID, false, m.cfg.BusyWait)
	if err != nil {
		return target, err
	}
	rec, err := m.rollbackLocked(c.ctx, be, ck, c.rec, c.e, cp)
	return rec, c.end(err)
}

// rollbackLocked is Rollback with e held exclusively. It ends in a definite state: Running on
// the new engine instance, or, on any failure, Running on the old one (Dead with the cause
// when the old engine died meanwhile); the state it ends in is saved with retries (settle).
func (m *Manager) rollbackLocked(ctx context.Context, be Backend, ck Checkpointer, rec SandboxRecord, e *entry, cp CheckpointRecord) (SandboxRecord, error) {
	if err := m.setState(ctx, &rec, RollingBack, nil); err != nil {
		return rec, err
	}
	next := rec
	next.EngineID = newEngineID(rec.ID)
	inst, err := m.restoreInPlace(ctx, be, ck, &next, cp)
	if err != nil {
		return m.abortRollback(ctx, rec, e, fmt.Errorf("rolling back %s to %s: %w", rec.ID, cp.ID, err))
	}
	next.CheckpointID, next.Options = cp.ID, cp.Options
	next.Options.Name = rec.Options.Name
	next.Options.Lifecycle = rec.Options.Lifecycle // a rollback does not move the sandbox's deadline
	// The record names the new instance before the entry does: until it is saved the old
	// instance is the sandbox, and a failure to save destroys the new one.
	back := context.WithoutCancel(ctx)
	if err := m.settle(ctx, &next, Running, nil); err != nil {
		if derr := m.destroyEngine(back, be, inst.ID); derr != nil {
			m.log.Error("destroying the copy of a failed rollback", "sandbox_id", rec.ID, "engine_id", inst.ID, "err", derr)
		}
		return m.abortRollback(ctx, rec, e, fmt.Errorf("rolling back %s to %s: %w", rec.ID, cp.ID, err))
	}
	old := e.instance()
	e.mu.Lock()
	e.inst = inst
	e.mu.Unlock()
	m.watch(e, inst) // and no longer the old one, destroyed below
	if err := m.destroyEngine(back, be, old.ID); err != nil {
		m.log.Error("destroying rolled-back instance", "sandbox_id", rec.ID, "engine_id", old.ID, "err", err)
	}
	m.log.Info("rolled back", "sandbox_id", rec.ID, "checkpoint", cp.ID, "generation", next.Generation)
	return next, nil
}

// abortRollback ends a rollback that failed with cause: the sandbox (rec, RollingBack, on its
// old instance) goes back to Running, or to Dead with the reason when its old engine died
// meanwhile. It returns rec as saved and cause, joined with the error of saving the state
// when even settle's retries failed (the store is failing: the record stays RollingBack, and
// the next daemon start adopts the old instance, as for a daemon that stopped mid-rollback).
func (m *Manager) abortRollback(ctx context.Context, rec SandboxRecord, e *entry, cause error) (SandboxRecord, error) {
	to, why := Running, error(nil)
	if gone := e.gone(); gone != nil && errors.Is(gone, ErrDead) {
		to, why = Dead, gone
	}
	if err := m.settle(ctx, &rec, to, why); err != nil {
		m.log.Error("saving the state of a failed rollback; the record stays rolling_back until the next daemon start",
			"sandbox_id", rec.ID, "err", err)
		return rec, errors.Join(cause, fmt.Errorf("saving sandbox %s as %s after the failed rollback: %w", rec.ID, to, err))
	}
	if to == Dead {
		m.dropLive(e)
	}
	return rec, cause
}

// settleTimeout bounds how long settle retries.
const settleTimeout = 10 * time.Second

// settle is setState for a state a step must end in (the outcome of a rollback): it runs on a
// ctx detached from the caller's (a caller that went away must not leave the sandbox
// half-way) and retries a failing store for up to settleTimeout. An illegal move is not
// retried.
func (m *Manager) settle(ctx context.Context, rec *SandboxRecord, to State, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	delay := 20 * time.Millisecond
	for {
		err := m.setState(ctx, rec, to, cause)
		var te *TransitionError
		if err == nil || errors.As(err, &te) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, time.Second)
	}
}

// restoreInPlace restores cp under rec.EngineID and reseals it; on error it destroys it.
func (m *Manager) restoreInPlace(ctx context.Context, be Backend, ck Checkpointer, rec *SandboxRecord, cp CheckpointRecord) (*Instance, error) {
	if err := m.checkRestoreRoot(cp); err != nil { // before anything is made for the new instance
		return nil, err
	}
	uid, err := m.hostUID(ctx, rec.ID) // the sandbox's own, which it keeps
	if err != nil {
		return nil, err
	}
	netAt, netID, err := m.attachNet(ctx, rec.EngineID, cp.Options.Network) // a new address and MAC
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	defer cancel()
	spec := restoreSpec(cp, rec.EngineID, uid, netAt)
	inst, err := ck.Restore(rctx, cp.Dir, spec)
	if err != nil {
		if derr := m.destroyEngine(context.WithoutCancel(ctx), be, rec.EngineID); derr != nil {
			m.log.Error("cleaning up a failed restore", "engine_id", rec.EngineID, "err", derr)
		}
		return nil, err
	}
	rec.Net = netID
	saved := *rec
	saved.CheckpointID = cp.ID
	saved.Options.Secrets = cp.Options.Secrets // the copy is the image's: it gets the image's secrets
	if _, err := m.resealChild(ctx, be, &saved, cp, inst, spec.Hostname); err != nil {
		var undo cleanup.Stack
		undo.Add(func(ctx context.Context) error { return m.destroyEngine(ctx, be, inst.ID) })
		if uerr := undo.Run(ctx, 0); uerr != nil {
			m.log.Error("destroying copy that failed reseal", "engine_id", inst.ID, "err", uerr)
		}
		return nil, err
	}
	rec.Generation, rec.Token = saved.Generation, saved.Token
	return inst, nil
}

// restoreSpec is the Spec of engine instance engineID restored from cp: the source's root and
// limits (the image needs them), cp's guest token, and what each copy has of its own (host
// uid, network attachment).
func restoreSpec(cp CheckpointRecord, engineID string, uid uint32, netAt *NetAttachment) Spec {
	return Spec{ID: engineID, Hostname: engineID, RootfsDir: cp.Options.RootfsDir, Token: cp.Token,
		Limits: cp.Options.Limits(), HostUID: uid, Net: netAt, ImageImported: cp.Origin != nil}
}

// checkRestoreRoot checks the root a restore of cp is about to run on, as Create checks a
// rootfs_dir, every time (the directory may have changed since the checkpoint was taken: a
// symlink put in its place): clear of the daemon's directories, an existing non-empty
// directory, reachable by the engine's uids. An imported checkpoint's root must moreover be
// the default root or the directory of one of this daemon's templates as configured now. A
// failure wraps errdefs.ErrFailedPrecondition (the checkpoint's root, not the caller's input,
// is at fault) and never names a protected directory.
func (m *Manager) checkRestoreRoot(cp CheckpointRecord) error {
	root := cp.Options.RootfsDir
	if root == "" {
		return nil
	}
	if cp.Origin != nil && !m.isTemplateRoot(root) {
		return fmt.Errorf("checkpoint %s was imported and its root is no longer the directory of a template of this daemon: %w",
			cp.ID, errdefs.ErrFailedPrecondition)
	}
	err := rootfsClearOf(root, append([]string{m.cfg.ImageDir, m.cfg.SecretImageDir}, m.cfg.ProtectedDirs...))
	if err == nil {
		err = ValidateRootfs(root)
	}
	if err == nil {
		err = m.rootfsReachable(root)
	}
	if err != nil {
		return fmt.Errorf("the root of checkpoint %s: %s: %w", cp.ID, errdefs.Message(err), errdefs.ErrFailedPrecondition)
	}
	return nil
}

// isTemplateRoot reports whether dir is the root directory of one of the Manager's templates.
func (m *Manager) isTemplateRoot(dir string) bool {
	for _, t := range m.Templates() {
		if t.RootfsDir != "" && t.RootfsDir == dir {
			return true
		}
	}
	return false
}
