package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
)

// ResealTarget is one restored copy awaiting reseal. Sandbox already carries the new
// Generation and Token the copy must end up with; Guest still authenticates with the token
// that was in the image (Checkpoint.Token).
type ResealTarget struct {
	Sandbox    SandboxRecord
	Checkpoint CheckpointRecord
	Hostname   string
	Guest      Guest
	ResumedAt  time.Time
	// Secrets are the current values of the secrets the copy names (Sandbox.Options.Secrets),
	// read through ManagerConfig.Secrets just before the hook runs; nil when it names none.
	// DefaultReseal writes exactly these to /run/secrets.
	Secrets SecretValues
}

// ResealFunc makes one restored copy independent. It returns only after the guest has
// acknowledged, with the guest's answer; any error means the copy is destroyed and never
// Running. It must be safe to call for siblings concurrently.
type ResealFunc func(ctx context.Context, t ResealTarget) (guest.ResealResult, error)

// DefaultReseal is the built-in ResealFunc: fresh host entropy, the new generation and
// identity, a per-copy machine id, the clock check and the token rotation, all executed by
// zygo-guest (see guest.ResealRequest), and the copy's secrets (t.Secrets) rewritten into
// /run/secrets. It checks that the guest reports the new generation.
func DefaultReseal(ctx context.Context, t ResealTarget) (guest.ResealResult, error) {
	return ResealWith(ctx, t, t.Secrets)
}

// ResealWith is DefaultReseal with secrets, instead of t.Secrets, as the exact contents of
// /run/secrets (other files there are removed).
func ResealWith(ctx context.Context, t ResealTarget, secrets map[string][]byte) (guest.ResealResult, error) {
	req, err := NewResealRequest(t, secrets)
	if err != nil {
		return guest.ResealResult{}, err
	}
	return SendReseal(ctx, t, req)
}

// NewResealRequest returns the request DefaultReseal sends for t: fresh host entropy (64 bytes)
// and machine id, t's new token, generation, identity and hostname, secrets, and the host's
// wall clock now. It fails only when the host's random source does.
func NewResealRequest(t ResealTarget, secrets map[string][]byte) (guest.ResealRequest, error) {
	entropy := make([]byte, 64)
	machineID := make([]byte, 16)
	if _, err := rand.Read(entropy); err != nil {
		return guest.ResealRequest{}, fmt.Errorf("drawing entropy: %w", err)
	}
	_, _ = rand.Read(machineID)
	return guest.ResealRequest{
		NewToken: t.Sandbox.Token,
		Identity: guest.Identity{
			SandboxID: t.Sandbox.ID, ParentID: t.Sandbox.ParentID, CheckpointID: t.Checkpoint.ID,
			Generation: t.Sandbox.Generation, Hostname: t.Hostname, ResumedAt: t.ResumedAt,
			SuspendedNS: int64(t.ResumedAt.Sub(t.Checkpoint.CreatedAt)),
		},
		MachineID: fmt.Sprintf("%x", machineID),
		Entropy:   entropy,
		HostTime:  time.Now(),
		Secrets:   secrets,
	}, nil
}

// SendReseal sends req to t's guest and checks the acknowledgement: the guest must report
// req's generation and an entropy sample of at least 16 bytes. It returns the guest's error,
// or one wrapping errdefs.ErrUnavailable for a wrong acknowledgement.
func SendReseal(ctx context.Context, t ResealTarget, req guest.ResealRequest) (guest.ResealResult, error) {
	res, err := t.Guest.Reseal(ctx, req)
	if err != nil {
		return res, err
	}
	if res.Generation != t.Sandbox.Generation {
		return res, fmt.Errorf("guest reports generation %q, want %q: %w", res.Generation, t.Sandbox.Generation, errdefs.ErrUnavailable)
	}
	if len(res.EntropySample) < 16 {
		return res, fmt.Errorf("guest sent no entropy sample: %w", errdefs.ErrUnavailable)
	}
	return res, nil
}

// resealChild is THE reseal hook point (issue 5): every restored copy, fork child or rollback
// alike, passes here after Restore and before it may be marked Running. It gives rec a new
// generation and token, runs the configured ResealFunc under ReadyTimeout and, on success,
// leaves rec carrying the new values. On error the caller destroys the copy.
func (m *Manager) resealChild(ctx context.Context, be Backend, rec *SandboxRecord, cp CheckpointRecord, inst *Instance, hostname string) (guest.ResealResult, error) {
	next := *rec
	next.Generation, next.Token = newGeneration(), newToken()
	rctx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	defer cancel()
	secrets, err := m.secretValues(rctx, next.Options.Secrets) // the current values: a rotation reaches this copy
	if err != nil {
		return guest.ResealResult{}, fmt.Errorf("resealing %s: %w", rec.ID, err)
	}
	res, err := m.cfg.Reseal(rctx, ResealTarget{Sandbox: next, Checkpoint: cp, Hostname: hostname, Guest: inst.Guest,
		ResumedAt: m.cfg.Now(), Secrets: secrets})
	if err != nil {
		return res, fmt.Errorf("resealing %s: %w", rec.ID, err)
	}
	if err := m.verifyOutOfBand(rctx, be, inst.ID, next.Generation); err != nil {
		return res, fmt.Errorf("resealing %s: %w", rec.ID, err)
	}
	if err := checkNetIdentity(rec.Net, res.Interfaces); err != nil { // fail closed: never a copy with the image's address
		return res, fmt.Errorf("resealing %s: network identity: %w: %w", rec.ID, err, errdefs.ErrUnavailable)
	}
	rec.Generation, rec.Token = next.Generation, next.Token
	m.log.Info("resealed", "sandbox_id", rec.ID, "generation", rec.Generation, "clock_offset", res.ClockOffset)
	if len(res.HostSecrets) > 0 {
		// Case BH-20: the checkpoint holds per-machine secrets; each copy renewed its own.
		m.log.Warn("the checkpoint carries per-machine secrets; renewed in this copy", "sandbox_id", rec.ID,
			"checkpoint", cp.ID, "files", res.HostSecrets)
	}
	return res, nil
}

// errDuplicateEntropy marks a fork child whose entropy sample equals a sibling's.
var errDuplicateEntropy = errors.New("entropy sample repeats a sibling's")

// checkDistinct returns, for each index, errDuplicateEntropy when its sample equals another
// successful sibling's (both are failed), else nil.
func checkDistinct(samples [][]byte) []error {
	errs := make([]error, len(samples))
	for i := range samples {
		for j := range samples {
			if i != j && samples[i] != nil && bytes.Equal(samples[i], samples[j]) {
				errs[i] = errDuplicateEntropy
			}
		}
	}
	return errs
}

// GenerationReader is an optional Backend capability: it reads the
// generation an instance has published, through the engine itself (gVisor:
// runsc exec), not through the guest agent's channel. Reseal's verification
// then does not rest on a channel that code inside the sandbox might have
// taken over (docs/sandboxes.md, "Known gaps"). It returns the trimmed
// contents of /run/zygo/generation, or an error wrapping
// errdefs.ErrUnavailable when the engine cannot run it.
type GenerationReader interface {
	ReadGeneration(ctx context.Context, id string) (string, error)
}

// verifyOutOfBand checks, when the backend can, that the copy really
// published want; a copy that did not is not resealed (fail closed).
func (m *Manager) verifyOutOfBand(ctx context.Context, be Backend, engineID, want string) error {
	gr, ok := be.(GenerationReader)
	if !ok {
		return nil
	}
	got, err := gr.ReadGeneration(ctx, engineID)
	if err != nil {
		return fmt.Errorf("verifying the generation through the engine: %w", err)
	}
	if got != want {
		return fmt.Errorf("the generation read through the engine (%.40q) is not the one reseal published: "+
			"the guest's answers cannot be trusted", got) // quoted short: the sandbox wrote it
	}
	return nil
}
