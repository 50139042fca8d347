package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// What a sandbox does when its timeout passes (Lifecycle.OnTimeout).
const (
	OnTimeoutKill  = "kill"  // removed, as by rm (the default)
	OnTimeoutPause = "pause" // paused (Pause): it can be resumed later
)

// MaxTimeout bounds a sandbox's timeout: 30 days.
const MaxTimeout = 30 * 24 * time.Hour

// MaxMetadata bounds CreateOptions.Metadata: pairs, and bytes of each key and value.
const (
	MaxMetadata      = 64
	MaxMetadataBytes = 256
)

// Lifecycle is when a sandbox ends by itself. It is kept in the record (CreateOptions), so a
// restarted daemon honours it; the Manager's expiry loop (StartExpiry) acts on it.
type Lifecycle struct {
	// Timeout is how long the sandbox lives from when it starts running (create, fork,
	// restore, resume) or from its last SetTimeout; 0: forever.
	Timeout time.Duration `json:"timeout,omitempty"`
	// ExpiresAt is when the timeout passes; set by the Manager from Timeout, zero when
	// Timeout is 0 or the sandbox is paused.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// OnTimeout is OnTimeoutKill ("" means it too) or OnTimeoutPause.
	OnTimeout string `json:"on_timeout,omitempty"`
}

// started returns l with ExpiresAt counted from now (zero without a Timeout).
func (l Lifecycle) started(now time.Time) Lifecycle {
	l.ExpiresAt = time.Time{}
	if l.Timeout > 0 {
		l.ExpiresAt = now.Add(l.Timeout).UTC()
	}
	return l
}

// validateLifecycle checks a Lifecycle a caller gave: the field names are the API's.
func validateLifecycle(l Lifecycle) error {
	if l.Timeout < 0 || l.Timeout > MaxTimeout {
		return invalid("timeout", "%s: must be from 0 (none) to %s", l.Timeout, MaxTimeout)
	}
	switch l.OnTimeout {
	case "", OnTimeoutKill, OnTimeoutPause:
	default:
		return invalid("on_timeout", "%s: want %q or %q", short(l.OnTimeout), OnTimeoutKill, OnTimeoutPause)
	}
	return nil
}

// validateMetadata checks CreateOptions.Metadata.
func validateMetadata(md map[string]string) error {
	if len(md) > MaxMetadata {
		return invalid("metadata", "%d pairs: at most %d", len(md), MaxMetadata)
	}
	for k, v := range md {
		if k == "" || len(k) > MaxMetadataBytes || len(v) > MaxMetadataBytes {
			return invalid("metadata", "key %s: keys must be 1-%d bytes and values at most %d", short(k), MaxMetadataBytes, MaxMetadataBytes)
		}
	}
	return nil
}

// SetTimeout gives the sandbox a new timeout counted from now (0: none) and, when onTimeout
// is not empty, a new OnTimeout action; the deadline is saved in its record. It returns the
// record as saved, or an error wrapping errdefs.ErrNotFound for an unknown sandbox,
// errdefs.ErrInvalidArgument for a bad value, errdefs.ErrFailedPrecondition when the sandbox
// is not Running (a paused one gets its timeout when it resumes).
func (m *Manager) SetTimeout(ctx context.Context, idOrName string, timeout time.Duration, onTimeout string) (SandboxRecord, error) {
	l := Lifecycle{Timeout: timeout, OnTimeout: onTimeout}
	if err := validateLifecycle(l); err != nil {
		return SandboxRecord{}, err
	}
	// Shared: it changes no engine state, and must not wait behind a long exec.
	c, err := m.begin(ctx, idOrName, true, 0)
	if err != nil {
		return SandboxRecord{}, err
	}
	m.recMu.Lock()
	defer m.recMu.Unlock()
	rec, err := m.reg.GetSandbox(ctx, c.rec.ID)
	if err == nil && rec.State != Running {
		err = fmt.Errorf("sandbox %s is %s: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	if err != nil {
		return rec, c.end(err)
	}
	if onTimeout == "" {
		l.OnTimeout = rec.Options.Lifecycle.OnTimeout
	}
	rec.Options.Lifecycle = l.started(m.cfg.Now())
	rec.UpdatedAt = m.cfg.Now()
	if err := m.reg.PutSandbox(ctx, rec); err != nil {
		return rec, c.end(fmt.Errorf("saving sandbox %s: %w", rec.ID, err))
	}
	return rec, c.end(nil)
}

// expiryTick is how often the expiry loop looks for sandboxes past their deadline.
const expiryTick = time.Second

// StartExpiry starts the loop that ends sandboxes past their Lifecycle.ExpiresAt: removed
// (OnTimeoutKill) or paused (OnTimeoutPause). The deadline is in each record, so a sandbox
// that expired while the daemon was down is ended at the loop's first pass. The loop stops
// when ctx ends or the Manager is closed. Call it once.
func (m *Manager) StartExpiry(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(m.ctx, cancel)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer stop()
		defer cancel()
		t := time.NewTicker(expiryTick)
		defer t.Stop()
		for {
			m.expireDue(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// expireDue ends every Running sandbox whose deadline has passed, one at a time.
func (m *Manager) expireDue(ctx context.Context) {
	recs, err := m.List(ctx)
	if err != nil {
		m.log.Warn("listing sandboxes for their timeouts", "err", err)
		return
	}
	now := m.cfg.Now()
	for _, rec := range recs {
		l := rec.Options.Lifecycle
		if rec.State != Running || l.ExpiresAt.IsZero() || now.Before(l.ExpiresAt) || ctx.Err() != nil {
			continue
		}
		if l.OnTimeout == OnTimeoutPause {
			_, err = m.Pause(ctx, rec.ID)
		} else {
			err = m.Remove(ctx, rec.ID)
		}
		if err != nil && !errdefs.IsNotFound(err) {
			m.log.Warn("ending a sandbox past its timeout", "sandbox_id", rec.ID, "on_timeout", l.OnTimeout, "err", err)
			continue
		}
		m.log.Info("sandbox timed out", "sandbox_id", rec.ID, "on_timeout", l.OnTimeout, "expired_at", l.ExpiresAt)
	}
}
