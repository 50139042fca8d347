// Package secret keeps Zygo's secrets: named values encrypted at rest in the
// store (table "secrets") with NaCl secretbox (XSalsa20-Poly1305, from
// golang.org/x/crypto/nacl/secretbox), under a 32-byte key kept in a file of
// mode 0600 in the state directory.
//
// Values leave this package only through Value, which the function manager
// calls to write a request's secret files from outside its sandbox; they
// are never logged, never put in the environment or a protocol message.
package secret

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"time"

	"golang.org/x/crypto/nacl/secretbox"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// MaxValueBytes bounds one secret's value, bytes.
const MaxValueBytes = 64 << 10

// NamePattern is the rule for a secret's name, the one copy every caller (the store, the
// function manifest, sandbox create, the CLI) checks against through ValidName: a name
// becomes a file name under /run/secrets and an identifier in code.
const NamePattern = `[A-Za-z_][A-Za-z0-9_]{0,127}`

var nameRE = regexp.MustCompile(`^` + NamePattern + `$`)

// Store is the encrypted secret table. It is safe for concurrent use.
type Store struct {
	db  *sql.DB
	key [32]byte
}

// Meta is what `zygo secret ls` shows: never the value.
type Meta struct {
	Name      string    `json:"name"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Open creates the secrets table in db if needed and loads the key from
// keyFile, creating it (mode 0600, 32 random bytes) when missing. A key file
// with the wrong size or a mode readable by others is an error.
func Open(ctx context.Context, db *sql.DB, keyFile string) (*Store, error) {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS secrets (
		name TEXT PRIMARY KEY, nonce BLOB NOT NULL, box BLOB NOT NULL, updated_at INTEGER NOT NULL)`); err != nil {
		return nil, fmt.Errorf("creating secrets table: %w", err)
	}
	s := &Store{db: db}
	if err := s.loadKey(keyFile); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) loadKey(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		if _, err := io.ReadFull(rand.Reader, s.key[:]); err != nil {
			return fmt.Errorf("generating secret key: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("creating secret key file: %w", err)
		}
		defer f.Close()
		if _, err := f.Write(s.key[:]); err != nil {
			return fmt.Errorf("writing secret key file: %w", err)
		}
		return f.Sync()
	}
	if err != nil {
		return fmt.Errorf("opening secret key file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("secret key file %s has mode %o: it must be 0600", path, st.Mode().Perm())
	}
	if n, err := io.ReadFull(f, s.key[:]); err != nil || n != 32 || st.Size() != 32 {
		return fmt.Errorf("secret key file %s must hold exactly 32 bytes", path)
	}
	return nil
}

// ValidName reports an error (errdefs.ErrInvalidArgument) for a name that
// cannot be a secret name: it becomes a file name under /run/secrets.
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: secret name %q must match %s", errdefs.ErrInvalidArgument, name, NamePattern)
	}
	return nil
}

// Set stores (or replaces) a secret. Errors: errdefs.ErrInvalidArgument for
// a bad name or an empty value, errdefs.ErrTooLarge for one over
// MaxValueBytes.
func (s *Store) Set(ctx context.Context, name string, value []byte) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if len(value) == 0 {
		return fmt.Errorf("%w: secret %q: empty value", errdefs.ErrInvalidArgument, name)
	}
	if len(value) > MaxValueBytes {
		return fmt.Errorf("%w: secret %q: value exceeds %d KiB", errdefs.ErrTooLarge, name, MaxValueBytes>>10)
	}
	var nonce [24]byte
	if _, err := io.ReadFull(rand.Reader, nonce[:]); err != nil {
		return fmt.Errorf("sealing secret: %w", err)
	}
	box := secretbox.Seal(nil, value, &nonce, &s.key)
	_, err := s.db.ExecContext(ctx, `INSERT INTO secrets (name, nonce, box, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET nonce = excluded.nonce, box = excluded.box, updated_at = excluded.updated_at`,
		name, nonce[:], box, time.Now().UnixMilli())
	if err != nil {
		return fmt.Errorf("storing secret %q: %w", name, err)
	}
	return nil
}

// List returns every secret's name and update time, sorted by name.
func (s *Store) List(ctx context.Context) ([]Meta, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, updated_at FROM secrets ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("listing secrets: %w", err)
	}
	defer rows.Close()
	out := []Meta{}
	for rows.Next() {
		var m Meta
		var at int64
		if err := rows.Scan(&m.Name, &at); err != nil {
			return nil, err
		}
		m.UpdatedAt = time.UnixMilli(at)
		out = append(out, m)
	}
	return out, rows.Err()
}

// Remove deletes a secret; errdefs.ErrNotFound if it does not exist.
func (s *Store) Remove(ctx context.Context, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM secrets WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("removing secret %q: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("secret %q: %w", name, errdefs.ErrNotFound)
	}
	return nil
}

// Missing returns the names among names that are not stored.
func (s *Store) Missing(ctx context.Context, names []string) ([]string, error) {
	var missing []string
	for _, n := range names {
		var one int
		err := s.db.QueryRowContext(ctx, `SELECT 1 FROM secrets WHERE name = ?`, n).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			missing = append(missing, n)
		} else if err != nil {
			return nil, fmt.Errorf("looking up secret %q: %w", n, err)
		}
	}
	return missing, nil
}

// Value decrypts one secret. The caller must not log it. Errors:
// errdefs.ErrNotFound; a decryption failure (wrong key file) is reported
// without the value.
func (s *Store) Value(ctx context.Context, name string) ([]byte, error) {
	var nonce, box []byte
	err := s.db.QueryRowContext(ctx, `SELECT nonce, box FROM secrets WHERE name = ?`, name).Scan(&nonce, &box)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("secret %q: %w", name, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %q: %w", name, err)
	}
	var n [24]byte
	copy(n[:], nonce)
	out, ok := secretbox.Open(nil, box, &n, &s.key)
	if !ok {
		return nil, fmt.Errorf("secret %q cannot be decrypted with this state dir's key file", name)
	}
	return out, nil
}
