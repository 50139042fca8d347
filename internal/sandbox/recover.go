package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// RecoverReport says what recovery did, by sandbox id (or engine id for orphans).
type RecoverReport struct {
	Adopted []string `json:"adopted"` // running again, reachable
	Dead    []string `json:"dead"`    // engine instance died: marked Dead, cleaned up
	Dropped []string `json:"dropped"` // interrupted before Running: destroyed, record deleted
	Orphans []string `json:"orphans"` // engine instances without a record: destroyed
	// Interrupted were left as they were because recovery was stopped (the daemon stopping);
	// the next start recovers them.
	Interrupted []string `json:"interrupted,omitempty"`
}

// Recovery is a recovery running in the background (StartRecover).
type Recovery struct {
	done chan struct{}

	mu  sync.Mutex // guards rep
	rep RecoverReport
}

// Done is closed when the recovery has finished.
func (r *Recovery) Done() <-chan struct{} { return r.done }

// Wait waits for the recovery to finish and returns its report, or ctx's error.
func (r *Recovery) Wait(ctx context.Context) (RecoverReport, error) {
	select {
	case <-r.done:
	case <-ctx.Done():
		return RecoverReport{}, ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rep, nil
}

func (r *Recovery) add(list *[]string, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*list = append(*list, id)
}

// Recover is StartRecover and Wait: it returns when every sandbox is recovered.
func (m *Manager) Recover(ctx context.Context) (RecoverReport, error) {
	r, err := m.StartRecover(ctx)
	if err != nil {
		return RecoverReport{}, err
	}
	return r.Wait(ctx)
}

// StartRecover adopts the sandboxes an earlier process left (after a daemon restart), in the
// background, so that the API can serve meanwhile. Before it returns it lists the records and
// the engine's instances, removes image directories no checkpoint names, and marks every
// sandbox it will work on as Recovering (shown by Get and List; calls on it answer
// ErrRecovering, rm waits for it). Then up to ManagerConfig.RecoverWorkers at a time:
// running ones are attached again (Running; a watch starts on their engine); ones whose
// engine instance died are cleaned up and marked Dead; ones caught half-made (creating,
// restoring, resealing, removing) are destroyed and forgotten; last, engine instances no
// record accounts for are destroyed. ctx ending (or Close) stops it, leaving the records not
// yet done as they were. Call it once, before serving. It returns an error only when the
// registry or the engine cannot be listed.
func (m *Manager) StartRecover(ctx context.Context) (*Recovery, error) {
	recs, err := m.reg.ListSandboxes(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	engines := map[string]Backend{} // engine id → the backend that has it
	for name, be := range m.bes.byName {
		ids, err := be.List(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing the engine instances of backend %s: %w", name, err)
		}
		for _, id := range ids {
			engines[id] = be
		}
	}
	m.removeStrayImages(ctx)  // before serving: no checkpoint is being written yet
	keep := map[string]bool{} // engine ids a record accounts for; the rest are orphans
	var jobs []SandboxRecord
	m.mu.Lock()
	for _, rec := range recs {
		keep[rec.EngineID] = true
		if rec.State != Failed && rec.State != Dead {
			jobs = append(jobs, rec)
			m.recovering[rec.ID] = make(chan struct{})
		}
	}
	m.mu.Unlock()
	r := &Recovery{done: make(chan struct{})}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(m.ctx, cancel)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(r.done)
		defer cancel()
		defer stop()
		m.recoverAll(wctx, r, jobs)
		for id, be := range engines {
			if !keep[id] && wctx.Err() == nil {
				if err := m.destroyEngine(wctx, be, id); err == nil {
					r.add(&r.rep.Orphans, id)
				}
			}
		}
		if m.cfg.Network != nil && wctx.Err() == nil { // interrupted: the next daemon adopts them
			if err := m.cfg.Network.ReleaseKept(wctx); err != nil {
				m.log.Warn("removing network endpoints nobody adopted", "err", err)
			}
		}
		r.mu.Lock()
		rep := r.rep
		r.mu.Unlock()
		m.log.Info("recovered sandboxes", "adopted", len(rep.Adopted), "dead", len(rep.Dead),
			"dropped", len(rep.Dropped), "orphans", len(rep.Orphans), "interrupted", len(rep.Interrupted))
	}()
	return r, nil
}

// recoverAll runs the jobs on at most RecoverWorkers goroutines.
func (m *Manager) recoverAll(ctx context.Context, r *Recovery, jobs []SandboxRecord) {
	next := make(chan SandboxRecord)
	var wg sync.WaitGroup
	for range min(m.cfg.RecoverWorkers, len(jobs)) {
		wg.Go(func() {
			for rec := range next {
				m.recoverOne(ctx, r, rec)
				m.recovered(rec.ID)
			}
		})
	}
	for _, rec := range jobs {
		next <- rec
	}
	close(next)
	wg.Wait()
}

// recoverOne adopts, marks Dead or drops one sandbox.
func (m *Manager) recoverOne(ctx context.Context, r *Recovery, rec SandboxRecord) {
	if ctx.Err() != nil {
		r.add(&r.rep.Interrupted, rec.ID)
		return
	}
	be, err := m.bes.named(rec.Backend)
	if err != nil { // a record of an engine this daemon does not run: left as it is
		m.log.Warn("not recovering sandbox", "sandbox_id", rec.ID, "err", err)
		r.add(&r.rep.Interrupted, rec.ID)
		return
	}
	switch rec.State {
	case Running, Checkpointing, RollingBack:
		switch m.adopt(ctx, be, rec) {
		case adopted:
			r.add(&r.rep.Adopted, rec.ID)
		case died:
			r.add(&r.rep.Dead, rec.ID)
		default:
			r.add(&r.rep.Interrupted, rec.ID)
		}
	case Paused: // no engine instance: one left by a pause the old process did not finish goes
		if err := m.destroyEngine(ctx, be, rec.EngineID); err != nil {
			m.log.Error("destroying the instance of a paused sandbox", "sandbox_id", rec.ID, "err", err)
		}
		r.add(&r.rep.Adopted, rec.ID)
	case Resuming: // the restore died with the old process; its instance is an orphan
		if err := m.setState(ctx, &rec, Paused, nil); err != nil {
			m.log.Error("putting an interrupted resume back to paused", "sandbox_id", rec.ID, "err", err)
		}
		r.add(&r.rep.Adopted, rec.ID)
	default: // Creating, Restoring, Resealing, Removing: never handed out, or going away
		if err := m.destroyEngine(ctx, be, rec.EngineID); err != nil {
			m.log.Error("destroying interrupted sandbox", "sandbox_id", rec.ID, "err", err)
			return
		}
		_ = m.reg.DeleteSandbox(ctx, rec.ID)
		r.add(&r.rep.Dropped, rec.ID)
	}
}

type adoption int

const (
	adopted adoption = iota
	died
	interrupted
)

// adopt attaches rec's engine instance and its network endpoint and marks it Running, or
// cleans it up and marks it Dead: an instance whose endpoint did not survive is destroyed
// (fail closed: never running on with half a network or another's address). When ctx ends
// first it leaves the record as it was (interrupted).
func (m *Manager) adopt(ctx context.Context, be Backend, rec SandboxRecord) adoption {
	actx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	defer cancel()
	spec := Spec{ID: rec.EngineID, Hostname: rec.EngineID, RootfsDir: rec.Options.RootfsDir, Token: rec.Token}
	inst, err := be.Attach(actx, spec)
	cause := "engine instance died while the daemon was down"
	if err == nil {
		if err = m.adoptNet(actx, rec); err != nil {
			cause = "its network could not be taken back after the daemon restarted"
		}
	}
	if err == nil {
		rec.State = Running // whatever step was in flight died with the old process
		rec.Error = ""
		if err = m.reg.PutSandbox(ctx, rec); err == nil {
			m.addLive(rec.ID, be, inst)
			return adopted
		}
	}
	if ctx.Err() != nil {
		return interrupted
	}
	m.log.Warn("sandbox not adopted", "sandbox_id", rec.ID, "cause", cause, "err", err)
	if derr := m.destroyEngine(ctx, be, rec.EngineID); derr != nil {
		m.log.Error("destroying dead sandbox", "sandbox_id", rec.ID, "err", derr)
	}
	_ = m.setState(ctx, &rec, Dead, fmt.Errorf("%s: %w", cause, err))
	return died
}

// isRecovering reports whether sandbox id is still waiting for its recovery.
func (m *Manager) isRecovering(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.recovering[id]
	return ok
}

// recovered ends sandbox id's recovery.
func (m *Manager) recovered(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ch, ok := m.recovering[id]; ok {
		close(ch)
		delete(m.recovering, id)
	}
}

// waitRecovered waits until sandbox id is not Recovering, or ctx ends (its error).
func (m *Manager) waitRecovered(ctx context.Context, id string) error {
	m.mu.Lock()
	ch := m.recovering[id]
	m.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sandbox %s is %w (%w)", id, ErrRecovering, ctx.Err())
	}
}

// removeStrayImages deletes image directories no checkpoint record names (a checkpoint that
// was interrupted before its record was written).
func (m *Manager) removeStrayImages(ctx context.Context) {
	cps, err := m.reg.ListCheckpoints(ctx)
	if err != nil {
		return
	}
	known := map[string]bool{}
	for _, cp := range cps {
		known[filepath.Clean(cp.Dir)] = true
	}
	for _, dir := range []string{m.cfg.ImageDir, m.cfg.SecretImageDir} {
		if dir == "" {
			continue
		}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			if !known[p] && (strings.HasPrefix(e.Name(), "cp-") || strings.HasPrefix(e.Name(), ".")) {
				_ = os.RemoveAll(p)
			}
		}
	}
	for _, cp := range cps {
		if imageLost(cp) {
			m.log.Warn("checkpoint image lost: it was held in memory (its sandbox held secrets) and the host "+
				"restarted since; zygo sandbox checkpoints shows it as lost, rm-checkpoint removes it", "checkpoint", cp.ID)
		}
	}
}
