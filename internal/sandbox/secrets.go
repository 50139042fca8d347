package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// Secrets of sandboxes. A sandbox names secrets at create (CreateOptions.Secrets); the names
// are kept in its record and inherited by every checkpoint, fork and rollback, the values
// never are. The Manager asks ManagerConfig.Secrets for the current values twice in a
// sandbox's life: at create, to write them into the new instance over the guest channel, and
// at every reseal, where they travel in ResealTarget.Secrets to the guest, which rewrites
// /run/secrets. So a secret set again reaches the next copy, and a copy made earlier keeps the
// value it was given.

// SecretsFunc returns the current values of the named secrets, decrypted, one per name. For a
// name it does not know it returns an error wrapping an *UnknownSecretError; for a malformed
// name, one wrapping errdefs.ErrInvalidArgument. Its errors must never contain a value. It is
// called at create and at every reseal, concurrently for siblings.
type SecretsFunc func(ctx context.Context, names []string) (SecretValues, error)

// SecretValues maps secret names to their values. It prints (fmt's %v, %s, %#v, and slog) as
// its names only, so that a value cannot reach a log or an error message by accident. The
// caller that holds one owns it and keeps it no longer than the write into the sandbox.
type SecretValues map[string][]byte

// String returns "[redacted: NAME, ...]", the names sorted.
func (s SecretValues) String() string {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	slices.Sort(names)
	return "[redacted: " + strings.Join(names, ", ") + "]"
}

// GoString is String, for %#v.
func (s SecretValues) GoString() string { return s.String() }

// LogValue is String, for slog.
func (s SecretValues) LogValue() slog.Value { return slog.StringValue(s.String()) }

// UnknownSecretError says a sandbox names a secret the store does not hold. It unwraps to
// errdefs.ErrNotFound.
type UnknownSecretError struct {
	Name string
}

func (e *UnknownSecretError) Error() string {
	return fmt.Sprintf("unknown secret %q (set it with `zygo secret set %s`)", e.Name, e.Name)
}

func (e *UnknownSecretError) Unwrap() error { return errdefs.ErrNotFound }

// createSecrets checks the names a new sandbox asks for and returns their values. Every
// refusal (no secret source, a name given twice, a malformed or unknown name) is an error
// wrapping errdefs.ErrInvalidArgument that names the secret.
func (m *Manager) createSecrets(ctx context.Context, names []string) (SecretValues, error) {
	if len(names) == 0 {
		return nil, nil
	}
	if m.cfg.Secrets == nil {
		return nil, fmt.Errorf("%w: secrets: this daemon has no secret store for sandboxes", errdefs.ErrInvalidArgument)
	}
	for i, n := range names {
		if slices.Contains(names[:i], n) {
			return nil, fmt.Errorf("%w: secrets: %q given twice", errdefs.ErrInvalidArgument, n)
		}
	}
	vals, err := m.secretValues(ctx, names)
	var unknown *UnknownSecretError
	if errors.As(err, &unknown) {
		return nil, fmt.Errorf("%w: secrets: %s", errdefs.ErrInvalidArgument, unknown) //nolint:errorlint // one cause on purpose: an unknown name is the request's fault (400), not a missing object (404)
	}
	return vals, err
}

// secretValues reads the current values of names through ManagerConfig.Secrets: nil for no
// names, else one value per name or an error.
func (m *Manager) secretValues(ctx context.Context, names []string) (SecretValues, error) {
	if len(names) == 0 {
		return nil, nil
	}
	if m.cfg.Secrets == nil {
		return nil, fmt.Errorf("the sandbox names secrets but this manager has no secret source: %w", errdefs.ErrFailedPrecondition)
	}
	vals, err := m.cfg.Secrets(ctx, names)
	if err != nil {
		return nil, fmt.Errorf("reading secrets: %w", err)
	}
	for _, n := range names {
		if _, ok := vals[n]; !ok {
			return nil, fmt.Errorf("reading secrets: %w", &UnknownSecretError{Name: n})
		}
	}
	return vals, nil
}
