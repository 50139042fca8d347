// Package backup copies a daemon's state dir into a backup directory and back (`zygo backup`,
// `zygo restore`). A backup holds what cannot be made again:
//
//	zygo.db             the store (functions, versions, secrets sealed with secret.key,
//	                    uid allocations, sandbox and checkpoint records, logs), copied
//	                    online with SQLite's VACUUM INTO
//	secret.key          the key the secrets are sealed with (mode 0600)
//	api.token           the TCP API's bearer token, when there is one
//	versions/NAME/H/    every stored version's code
//	images/ID/          checkpoint images, only with Options.Checkpoints (they can be large)
//	zygo-backup.json    the Manifest: what is included, each file's size and SHA-256
//
// Never in a backup: running sandboxes (a restored daemon marks their records dead), the
// images of checkpoints of sandboxes with secrets (kept in memory only, by design), what a
// daemon makes again at start (agents/, etc/, run/, the engine dir), and pools/: a runtime
// pool comes back from its record in the store and writes its boot module again when it
// starts, and its tenants' scripts are a content-addressed cache they already upload again
// when one is evicted (a run of a missing script answers 404). The backup directory holds the
// secret key: it must be one no other user can change (created here 0700, or an empty one of
// root's or the euid's on a path only they can change), it is made 0700, and it must be kept
// as the key itself is.
//
// Everything read from the state dir, and from a backup by Restore, is read through
// internal/untrusted (no symbolic links, regular files only, never blocking): checkpoint images
// are written by sandbox engines, and a backup may have been kept where others could reach it.
// Every file written, into the backup or the state dir, is created exclusively, never through
// a link.
package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/store"
	"github.com/zygo-run/zygo/internal/trusted"
	"github.com/zygo-run/zygo/internal/untrusted"
)

// ManifestFile is the name of a backup's Manifest inside its directory.
const ManifestFile = "zygo-backup.json"

// Format is the version of the backup layout this package writes and reads.
const Format = 1

// Names of what a backup holds, relative to the state dir and to the backup dir alike.
const (
	dbFile     = "zygo.db"
	keyFile    = "secret.key"
	tokenFile  = "api.token"
	versionDir = "versions"
	imageDir   = "images"
)

// maxEntries bounds the entries of one directory copied (untrusted.Dir.Names).
const maxEntries = 1 << 20

// Options says what Create includes beyond the store, the key and the versions.
type Options struct {
	// Checkpoints includes the checkpoint images (STATE/images): without them the checkpoint
	// records come back, but forking or rolling back to them fails until they are taken again.
	Checkpoints bool
	// ZygoVersion is recorded in the Manifest.
	ZygoVersion string
}

// Manifest describes a backup.
type Manifest struct {
	Format      int       `json:"format"`
	CreatedAt   time.Time `json:"created_at"`
	ZygoVersion string    `json:"zygo_version"`
	StateDir    string    `json:"state_dir"` // the state dir backed up (absolute), for the operator
	// Includes says which parts are in the backup.
	Includes Includes `json:"includes"`
	Files    []File   `json:"files"` // every file, sorted by path
}

// Includes lists the parts of a backup.
type Includes struct {
	Store       bool `json:"store"`
	SecretKey   bool `json:"secret_key"`
	APIToken    bool `json:"api_token"`
	Versions    int  `json:"versions"` // version directories
	Checkpoints bool `json:"checkpoints"`
}

// File is one file of a backup.
type File struct {
	Path   string `json:"path"` // slash-separated, relative to the backup dir
	Size   int64  `json:"size"` // bytes
	SHA256 string `json:"sha256"`
	Mode   uint32 `json:"mode"` // permission bits
}

// Create backs up stateDir into dir, which must not exist or be empty, and must be a directory
// no other user can change (makeBackupDir; it is made 0700). It runs while a daemon serves (the
// store is copied online), and fails, keeping nothing, when a version the copied store records
// is missing from the copy (one was removed meanwhile: run it again). Every file is created in
// dir exclusively, never through a link, and hashed as it is written. Errors wrap
// errdefs.ErrInvalidArgument for a bad dir or state dir.
func Create(ctx context.Context, stateDir, dir string, opts Options) (_ *Manifest, err error) {
	if _, err := os.Stat(filepath.Join(stateDir, dbFile)); err != nil {
		return nil, fmt.Errorf("%w: %s holds no Zygo state (%s): %w", errdefs.ErrInvalidArgument, stateDir, dbFile, err)
	}
	out, err := makeBackupDir(dir)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	defer func() {
		if err != nil {
			removeContents(out)
		}
	}()
	src, err := untrusted.OpenDir(stateDir)
	if err != nil {
		return nil, fmt.Errorf("opening the state dir: %w", err)
	}
	defer src.Close()
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, err
	}
	m := &Manifest{Format: Format, CreatedAt: time.Now().UTC(), ZygoVersion: opts.ZygoVersion, StateDir: abs}
	if err := store.Snapshot(ctx, filepath.Join(stateDir, dbFile), filepath.Join(out.Path(), dbFile)); err != nil {
		return nil, err
	}
	db, err := hashFile(ctx, out, dbFile, -1)
	if err != nil {
		return nil, fmt.Errorf("reading the store's copy: %w", err)
	}
	m.Files = append(m.Files, File{Path: dbFile, Size: db.size, SHA256: db.sum, Mode: 0o600})
	m.Includes.Store = true
	for _, name := range []string{keyFile, tokenFile} {
		f, err := copyFile(ctx, src, name, out, name)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return nil, fmt.Errorf("copying %s: %w", name, err)
		case name == keyFile:
			m.Includes.SecretKey = true
		default:
			m.Includes.APIToken = true
		}
		m.Files = append(m.Files, f)
	}
	if err := copyTree(ctx, src, out, versionDir, versionDir, &m.Files); err != nil {
		return nil, err
	}
	if m.Includes.Versions, err = checkVersions(ctx, out); err != nil {
		return nil, err
	}
	if opts.Checkpoints {
		if err := copyTree(ctx, src, out, imageDir, imageDir, &m.Files); err != nil {
			return nil, err
		}
		m.Includes.Checkpoints = true
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := out.WriteFile(ManifestFile, append(b, '\n'), 0o600); err != nil {
		return nil, fmt.Errorf("writing the backup's manifest: %w", err)
	}
	return m, nil
}

// checkVersions fails unless every version the copied store records has its directory in the
// backup dir out; it returns how many there are.
func checkVersions(ctx context.Context, out *untrusted.Dir) (int, error) {
	vs, err := store.SnapshotVersions(ctx, filepath.Join(out.Path(), dbFile))
	if err != nil {
		return 0, err
	}
	for _, v := range vs {
		d, err := out.Sub(path.Join(versionDir, v.Function, versionName(v.Hash)))
		if err != nil {
			return 0, fmt.Errorf("version %s of %q is in the store but its code is not (removed while the backup ran?): run the backup again",
				versionName(v.Hash), v.Function)
		}
		d.Close()
	}
	return len(vs), nil
}

// versionName is the directory name of a version hash ("sha256:HEX"): as the function
// manager names it, the first 32 hex digits.
func versionName(hash string) string {
	h := strings.TrimPrefix(hash, "sha256:")
	if len(h) > 32 {
		h = h[:32]
	}
	return h
}

// makeBackupDir makes dir 0700, or takes it when it exists empty, and opens it. Either way dir
// must be one no other user can change (trusted.Dir: owned by root or the euid, not group- or
// other-writable, nor any ancestor but a root-owned sticky one like /tmp): root writes the
// secret key and the store into it, and another user owning it could plant links there to
// redirect those writes. Errors wrap errdefs.ErrInvalidArgument and name the path.
func makeBackupDir(dir string) (*untrusted.Dir, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: backup dir: %w", errdefs.ErrInvalidArgument, err)
	}
	euid := os.Geteuid()
	if err := trusted.Ancestor(filepath.Dir(abs), euid); err != nil {
		return nil, fmt.Errorf("%w: backup dir: %w", errdefs.ErrInvalidArgument, err)
	}
	if err := os.Mkdir(abs, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("%w: creating the backup dir: %w", errdefs.ErrInvalidArgument, err)
	}
	if err := trusted.Dir(abs, euid); err != nil {
		return nil, fmt.Errorf("%w: backup dir: %w", errdefs.ErrInvalidArgument, err)
	}
	out, err := untrusted.OpenDir(abs)
	if err != nil {
		return nil, fmt.Errorf("%w: backup dir: %w", errdefs.ErrInvalidArgument, err)
	}
	names, err := out.Names(1) // errdefs.ErrTooLarge: more than one entry
	if errors.Is(err, errdefs.ErrTooLarge) || err == nil && len(names) > 0 {
		err = fmt.Errorf("%w: backup dir %s is not empty: give a new or empty directory", errdefs.ErrInvalidArgument, dir)
	}
	if err == nil {
		err = os.Chmod(abs, 0o700)
	}
	if err != nil {
		out.Close()
		return nil, err
	}
	return out, nil
}

// removeContents empties out (a failed backup's), keeping the directory itself.
func removeContents(out *untrusted.Dir) {
	names, _ := out.Names(maxEntries)
	for _, n := range names {
		_ = out.RemoveAll(context.Background(), n)
	}
}

// copyTree copies the directory name of src (a missing one is nothing to copy) to a new
// directory name (0700) of dst, appending each file copied to files with its path rel/...;
// anything but directories and regular files (a symbolic link a sandbox engine planted) is an
// error naming it.
func copyTree(ctx context.Context, src, dst *untrusted.Dir, name, rel string, files *[]File) error {
	sub, err := src.Sub(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("copying %s: %w", rel, err)
	}
	defer sub.Close()
	if err := dst.Mkdir(name, 0o700); err != nil {
		return fmt.Errorf("copying %s: %w", rel, err)
	}
	into, err := dst.Sub(name)
	if err != nil {
		return fmt.Errorf("copying %s: %w", rel, err)
	}
	defer into.Close()
	names, err := sub.Names(maxEntries)
	if err != nil {
		return fmt.Errorf("copying %s: %w", rel, err)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		if strings.HasSuffix(n, ".partial") {
			continue // a version being written (function.Unpacked.WriteTo)
		}
		if inner, err := sub.Sub(n); err == nil {
			inner.Close()
			if err := copyTree(ctx, sub, into, n, path.Join(rel, n), files); err != nil {
				return err
			}
			continue
		}
		f, err := copyFile(ctx, sub, n, into, path.Join(rel, n))
		if err != nil {
			return fmt.Errorf("copying %s: %w", path.Join(rel, n), err)
		}
		*files = append(*files, f)
	}
	return nil
}

// copyFile copies the regular file name of src to a new file name of dst (0600, created
// exclusively, never through a link) and returns it as a File at path rel with the size and
// SHA-256 of what was written and the source's permission bits. A missing file is an error
// wrapping os.ErrNotExist; on an error nothing is left at name.
func copyFile(ctx context.Context, src *untrusted.Dir, name string, dst *untrusted.Dir, rel string) (File, error) {
	in, err := src.Open(name)
	if err != nil {
		return File{}, err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return File{}, err
	}
	out, err := dst.Create(name, 0o600)
	if err != nil {
		return File{}, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), readerCtx{ctx, in})
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return File{}, errors.Join(err, dst.Remove(name))
	}
	return File{Path: rel, Size: n, SHA256: hex.EncodeToString(h.Sum(nil)), Mode: uint32(st.Mode().Perm())}, nil
}

// readerCtx stops a long copy when its context ends.
type readerCtx struct {
	ctx context.Context
	r   io.Reader
}

func (r readerCtx) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

// digest is a file's size in bytes and hex SHA-256.
type digest struct {
	size int64
	sum  string
}

// hashFile hashes the regular file name below d (a relative slash path; read through
// internal/untrusted: a link at any component, a FIFO or a device is refused, never waited
// on), reading at most max+1 bytes when max >= 0.
func hashFile(ctx context.Context, d *untrusted.Dir, name string, max int64) (digest, error) {
	f, err := d.Open(name)
	if err != nil {
		return digest{}, err
	}
	defer f.Close()
	var r io.Reader = readerCtx{ctx, f}
	if max >= 0 {
		r = io.LimitReader(r, max+1)
	}
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return digest{}, err
	}
	return digest{size: n, sum: hex.EncodeToString(h.Sum(nil))}, nil
}
