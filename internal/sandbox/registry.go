package sandbox

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
)

// SandboxRecord is what the Registry keeps about one sandbox.
type SandboxRecord struct {
	ID       string `json:"id"`   // stable across rollback; "sb-" + 16 hex digits
	Name     string `json:"name"` // unique among sandboxes; defaults to the id
	Backend  string `json:"backend"`
	EngineID string `json:"engine_id"` // current engine instance; changes on rollback
	State    State  `json:"state"`
	// ParentID is the sandbox this one was forked from; "" for a created one.
	ParentID string `json:"parent_id,omitempty"`
	// CheckpointID is the checkpoint this sandbox's current instance was restored from (fork or
	// rollback); "" for a created one. A checkpoint referenced here cannot be removed.
	CheckpointID string `json:"checkpoint_id,omitempty"`
	// Generation is the current 128-bit generation token, 32 hex digits; new on every reseal.
	Generation string `json:"generation"`
	// Token authenticates the host to the guest agent. Secret: left out of JSON so the API
	// cannot show it by accident; a Registry stores it in a field of its own.
	Token    string          `json:"-"`
	Options  CreateOptions   `json:"options"`
	Services []guest.Service `json:"services,omitempty"`
	// Net is the network identity of the current instance (new on every fork and rollback);
	// nil without network.
	Net       *NetIdentity `json:"net,omitempty"`
	Error     string       `json:"error,omitempty"` // why the sandbox is Failed
	CreatedAt time.Time    `json:"created_at"`
	UpdatedAt time.Time    `json:"updated_at"`
}

// CheckpointRecord is one immutable checkpoint image. Images form a tree: ParentID is the
// checkpoint the source sandbox was itself restored from, if any.
type CheckpointRecord struct {
	ID        string `json:"id"` // "cp-" + 16 hex digits
	Tag       string `json:"tag,omitempty"`
	SandboxID string `json:"sandbox_id"` // the source
	ParentID  string `json:"parent_id,omitempty"`
	Backend   string `json:"backend"`
	// Dir is the image directory, owned by the Manager: a host path, never serialised (the
	// API answers with the record, and callers are not told where the daemon keeps images).
	Dir       string `json:"-"`
	SizeBytes int64  `json:"size_bytes"`
	// Token is the guest token inside the image; a restored copy presents it until reseal
	// rotates it. Secret: left out of JSON, like SandboxRecord.Token.
	Token string `json:"-"`
	// Generation is the source's generation at checkpoint time.
	Generation string        `json:"generation"`
	Hostname   string        `json:"hostname"`
	Options    CreateOptions `json:"options"`
	CreatedAt  time.Time     `json:"created_at"`
	// Checksums has one entry per file of the image: its path relative to Dir and
	// "crc32c:" + 8 hex digits, taken when the checkpoint was written and checked before every
	// restore. Empty for checkpoints recorded before checksums existed (restored unchecked).
	Checksums map[string]string `json:"checksums,omitempty"`
	// Lost is set, by the Manager's listings and never stored, when the image is gone: an
	// image held in memory (its sandbox held secrets) does not survive a reboot.
	Lost bool `json:"lost,omitempty"`
	// Origin is set on a checkpoint imported from another daemon (ImportCheckpoint), nil on
	// one taken here. It is information only: an imported checkpoint belongs to no sandbox of
	// this daemon (its SandboxID is a fresh id that names none), and its restores are held to
	// the import rules (docs/sandboxes.md, "Moving a checkpoint to another daemon").
	Origin *CheckpointOrigin `json:"origin,omitempty"`
}

// CheckpointOrigin is where an imported checkpoint came from, as its image's manifest says
// (the exporter's word, unchecked: never used to resolve anything).
type CheckpointOrigin struct {
	CheckpointID string `json:"checkpoint_id"` // the exporter's checkpoint id
	SandboxID    string `json:"sandbox_id"`    // the exporter's sandbox id
	Tag          string `json:"tag,omitempty"` // the exporter's tag
}

// Registry persists sandbox and checkpoint records. The daemon implements it on SQLite;
// MemRegistry is the in-memory fake. Methods are safe for concurrent use. Records are values:
// a Registry never hands out memory the caller can change behind its back.
type Registry interface {
	// PutSandbox inserts or replaces the record with rec.ID. It returns an error wrapping
	// errdefs.ErrExists when another record already has rec.Name.
	PutSandbox(ctx context.Context, rec SandboxRecord) error
	// GetSandbox returns the record, or an error wrapping errdefs.ErrNotFound.
	GetSandbox(ctx context.Context, id string) (SandboxRecord, error)
	// ListSandboxes returns every record, oldest first.
	ListSandboxes(ctx context.Context) ([]SandboxRecord, error)
	// DeleteSandbox removes the record; an unknown id returns an error wrapping
	// errdefs.ErrNotFound.
	DeleteSandbox(ctx context.Context, id string) error

	// PutCheckpoint inserts rec; checkpoints are immutable, so an existing rec.ID returns an
	// error wrapping errdefs.ErrExists.
	PutCheckpoint(ctx context.Context, rec CheckpointRecord) error
	// GetCheckpoint returns the record, or an error wrapping errdefs.ErrNotFound.
	GetCheckpoint(ctx context.Context, id string) (CheckpointRecord, error)
	// ListCheckpoints returns every record, oldest first.
	ListCheckpoints(ctx context.Context) ([]CheckpointRecord, error)
	// DeleteCheckpoint removes the record; an unknown id returns an error wrapping
	// errdefs.ErrNotFound.
	DeleteCheckpoint(ctx context.Context, id string) error
}

// MemRegistry is an in-memory Registry for tests and for running without a store
// (sandboxtest.FaultyRegistry wraps it for tests of store failures).
type MemRegistry struct {
	mu          sync.Mutex // guards the maps
	sandboxes   map[string]SandboxRecord
	checkpoints map[string]CheckpointRecord
}

var _ Registry = (*MemRegistry)(nil)

// NewMemRegistry returns an empty MemRegistry.
func NewMemRegistry() *MemRegistry {
	return &MemRegistry{sandboxes: map[string]SandboxRecord{}, checkpoints: map[string]CheckpointRecord{}}
}

func (r *MemRegistry) PutSandbox(_ context.Context, rec SandboxRecord) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.sandboxes {
		if o.ID != rec.ID && o.Name == rec.Name {
			return fmt.Errorf("a sandbox named %q: %w", rec.Name, errdefs.ErrExists) // errdefs.Message: `… already exists`
		}
	}
	r.sandboxes[rec.ID] = cloneSandbox(rec)
	return nil
}

// cloneSandbox copies the slices of rec, so that a stored record and a handed-out one never
// share memory.
func cloneSandbox(rec SandboxRecord) SandboxRecord {
	rec.Services = slices.Clone(rec.Services)
	rec.Options.Services = slices.Clone(rec.Options.Services)
	rec.Options.Env = slices.Clone(rec.Options.Env)
	rec.Options.Secrets = slices.Clone(rec.Options.Secrets)
	rec.Options.Metadata = maps.Clone(rec.Options.Metadata)
	return rec
}

func (r *MemRegistry) GetSandbox(_ context.Context, id string) (SandboxRecord, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.sandboxes[id]
	if !ok {
		return rec, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return cloneSandbox(rec), nil
}

func (r *MemRegistry) ListSandboxes(context.Context) ([]SandboxRecord, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]SandboxRecord, 0, len(r.sandboxes))
	for _, rec := range r.sandboxes {
		out = append(out, cloneSandbox(rec))
	}
	slices.SortFunc(out, func(a, b SandboxRecord) int {
		return cmpTimeID(a.CreatedAt, b.CreatedAt, a.ID, b.ID)
	})
	return out, nil
}

func (r *MemRegistry) DeleteSandbox(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.sandboxes[id]; !ok {
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	delete(r.sandboxes, id)
	return nil
}

func (r *MemRegistry) PutCheckpoint(_ context.Context, rec CheckpointRecord) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.checkpoints[rec.ID]; ok {
		return fmt.Errorf("checkpoint %q: %w", rec.ID, errdefs.ErrExists)
	}
	r.checkpoints[rec.ID] = cloneCheckpoint(rec)
	return nil
}

func (r *MemRegistry) GetCheckpoint(_ context.Context, id string) (CheckpointRecord, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.checkpoints[id]
	if !ok {
		return rec, fmt.Errorf("checkpoint %q: %w", id, errdefs.ErrNotFound)
	}
	return cloneCheckpoint(rec), nil
}

func (r *MemRegistry) ListCheckpoints(context.Context) ([]CheckpointRecord, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]CheckpointRecord, 0, len(r.checkpoints))
	for _, rec := range r.checkpoints {
		out = append(out, cloneCheckpoint(rec))
	}
	slices.SortFunc(out, func(a, b CheckpointRecord) int {
		return cmpTimeID(a.CreatedAt, b.CreatedAt, a.ID, b.ID)
	})
	return out, nil
}

func (r *MemRegistry) DeleteCheckpoint(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.checkpoints[id]; !ok {
		return fmt.Errorf("checkpoint %q: %w", id, errdefs.ErrNotFound)
	}
	delete(r.checkpoints, id)
	return nil
}

func cloneCheckpoint(rec CheckpointRecord) CheckpointRecord {
	rec.Checksums = maps.Clone(rec.Checksums)
	rec.Options.Services = slices.Clone(rec.Options.Services)
	rec.Options.Env = slices.Clone(rec.Options.Env)
	rec.Options.Secrets = slices.Clone(rec.Options.Secrets)
	rec.Options.Metadata = maps.Clone(rec.Options.Metadata)
	if rec.Origin != nil {
		o := *rec.Origin
		rec.Origin = &o
	}
	return rec
}

func cmpTimeID(ta, tb time.Time, a, b string) int {
	if c := ta.Compare(tb); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}
