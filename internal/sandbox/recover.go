package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// RecoverReport says what Recover did, by sandbox id (or engine id for orphans).
type RecoverReport struct {
	Adopted []string `json:"adopted"` // running again, reachable
	Failed  []string `json:"failed"`  // engine instance died: marked Failed, cleaned up
	Dropped []string `json:"dropped"` // interrupted before Running: destroyed, record deleted
	Orphans []string `json:"orphans"` // engine instances without a record: destroyed
}

// Recover adopts the sandboxes an earlier process left (after a daemon restart): running
// ones are attached again; ones whose engine instance died are cleaned up and marked Failed;
// ones caught half-made (creating, restoring, resealing) are destroyed and forgotten; engine
// instances and image directories nobody references are removed. Call it once, before
// serving. It returns an error only when the registry or the engine cannot be listed.
func (m *Manager) Recover(ctx context.Context) (RecoverReport, error) {
	var rep RecoverReport
	recs, err := m.reg.ListSandboxes(ctx)
	if err != nil {
		return rep, fmt.Errorf("listing sandboxes: %w", err)
	}
	engines, err := m.be.List(ctx)
	if err != nil {
		return rep, fmt.Errorf("listing engine instances: %w", err)
	}
	keep := map[string]bool{} // engine ids a record accounts for; the rest are orphans
	for _, rec := range recs {
		switch rec.State {
		case Running, Checkpointing, RollingBack:
			if m.adopt(ctx, rec) {
				keep[rec.EngineID] = true
				rep.Adopted = append(rep.Adopted, rec.ID)
			} else {
				rep.Failed = append(rep.Failed, rec.ID)
			}
		case Failed:
			keep[rec.EngineID] = true // rm cleans it up
		default: // Creating, Restoring, Resealing, Removing: never handed out, or going away
			keep[rec.EngineID] = true
			if err := m.be.Destroy(ctx, rec.EngineID); err != nil {
				m.log.Error("destroying interrupted sandbox", "sandbox_id", rec.ID, "err", err)
				continue
			}
			_ = m.reg.DeleteSandbox(ctx, rec.ID)
			rep.Dropped = append(rep.Dropped, rec.ID)
		}
	}
	for _, id := range engines {
		if !keep[id] {
			if err := m.be.Destroy(ctx, id); err == nil {
				rep.Orphans = append(rep.Orphans, id)
			}
		}
	}
	m.removeStrayImages(ctx)
	m.log.Info("recovered sandboxes", "adopted", len(rep.Adopted), "failed", len(rep.Failed),
		"dropped", len(rep.Dropped), "orphans", len(rep.Orphans))
	return rep, nil
}

// adopt attaches rec's engine instance and marks it Running, or cleans it up and marks it
// Failed. It reports whether the sandbox is Running.
func (m *Manager) adopt(ctx context.Context, rec SandboxRecord) bool {
	actx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	defer cancel()
	spec := Spec{ID: rec.EngineID, Hostname: rec.EngineID, RootfsDir: rec.Options.RootfsDir, Token: rec.Token}
	inst, err := m.be.Attach(actx, spec)
	if err == nil {
		rec.State = Running // whatever step was in flight died with the old process
		rec.Error = ""
		if err = m.reg.PutSandbox(ctx, rec); err == nil {
			m.addLive(rec.ID, inst)
			return true
		}
	}
	m.log.Warn("sandbox engine instance is gone", "sandbox_id", rec.ID, "err", err)
	if derr := m.be.Destroy(ctx, rec.EngineID); derr != nil {
		m.log.Error("destroying dead sandbox", "sandbox_id", rec.ID, "err", derr)
	}
	_ = m.setState(ctx, &rec, Failed, fmt.Errorf("engine instance died: %w", err))
	return false
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
	ents, _ := os.ReadDir(m.cfg.ImageDir)
	for _, e := range ents {
		p := filepath.Join(m.cfg.ImageDir, e.Name())
		if !known[p] && (strings.HasPrefix(e.Name(), "cp-") || strings.HasPrefix(e.Name(), ".")) {
			_ = os.RemoveAll(p)
		}
	}
}
