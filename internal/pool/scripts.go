package pool

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
)

// Bounds of one script (a file, or a small directory as a tar).
const (
	MaxScriptBytes = 1 << 20 // all files together, bytes
	MaxScriptFiles = 256
	maxScriptPath  = 255 // bytes of one relative path
	maxScriptDepth = 8
	// ScriptFile is the name a script sent as a single file is stored
	// under: the entry point's default module (main:handler).
	ScriptFile = "main.py"
	// DefaultEntry is the entry point when a run names none.
	DefaultEntry = "main:handler"
	// MaxScriptsPerTenant bounds the scripts a tenant keeps in one pool;
	// storing one more evicts the least recently used (scriptStore.put).
	MaxScriptsPerTenant = 1000
	// evictAfter is how long a script must have gone unused before it may
	// be evicted (a request in flight may still be opening its files).
	evictAfter = 10 * time.Minute
)

var (
	hashRE     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	pathPartRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
	entryRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
)

// ValidHash checks a script hash (64 lowercase hex digits).
func ValidHash(field, h string) error {
	if !hashRE.MatchString(h) {
		return fmt.Errorf("%w: %s: %q is not a script hash (64 hex digits, as PUT /v1/pools/{name}/scripts answers)", errdefs.ErrInvalidArgument, field, h)
	}
	return nil
}

// ValidEntry checks an entry point MODULE:FUNCTION.
func ValidEntry(field, e string) error {
	if !entryRE.MatchString(e) || len(e) > 255 {
		return fmt.Errorf("%w: %s: %q must be MODULE:FUNCTION (for example main:handler)", errdefs.ErrInvalidArgument, field, e)
	}
	return nil
}

// Script is one script's files: relative slash path → content.
type Script map[string][]byte

// Hash returns the script's content hash: SHA-256 over its paths and
// contents in path order, each as path, NUL, length, NUL, content; hex.
func (s Script) Hash() string {
	h := sha256.New()
	for _, name := range s.names() {
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(s[name]))
		h.Write(s[name])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (s Script) names() []string {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ReadScript reads an uploaded script: a tar (optionally gzip'd) of a
// directory when isTar, else one file stored as ScriptFile. Bounds:
// MaxScriptBytes, MaxScriptFiles, paths of at most 255 bytes and 8 levels
// of [A-Za-z0-9_.-] names; only regular files and directories. Errors
// wrap errdefs.ErrInvalidArgument or ErrTooLarge and name the entry.
func ReadScript(r io.Reader, isTar bool) (Script, error) {
	if !isTar {
		b, err := io.ReadAll(io.LimitReader(r, MaxScriptBytes+1))
		if err != nil {
			return nil, fmt.Errorf("reading the script: %w", err)
		}
		if len(b) > MaxScriptBytes {
			return nil, fmt.Errorf("%w: script: over %d bytes", errdefs.ErrTooLarge, MaxScriptBytes)
		}
		return Script{ScriptFile: b}, nil
	}
	br := bufio.NewReader(r)
	var src io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: script: not a gzip'd tar: %w", errdefs.ErrInvalidArgument, err)
		}
		defer gz.Close()
		src = gz
	}
	return readTar(tar.NewReader(src))
}

func readTar(tr *tar.Reader) (Script, error) {
	s := Script{}
	total := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: script: not a tar: %w", errdefs.ErrInvalidArgument, err)
		}
		name := strings.TrimPrefix(path.Clean(strings.TrimPrefix(h.Name, "./")), "./")
		if h.Typeflag == tar.TypeDir || name == "." {
			continue
		}
		if err := checkScriptPath(h.Name, name); err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("%w: script: %q: only regular files and directories are allowed", errdefs.ErrInvalidArgument, h.Name)
		}
		if _, dup := s[name]; dup {
			return nil, fmt.Errorf("%w: script: %q appears twice", errdefs.ErrInvalidArgument, h.Name)
		}
		if len(s) == MaxScriptFiles {
			return nil, fmt.Errorf("%w: script: more than %d files", errdefs.ErrTooLarge, MaxScriptFiles)
		}
		b, err := io.ReadAll(io.LimitReader(tr, int64(MaxScriptBytes-total)+1))
		if err != nil {
			return nil, fmt.Errorf("%w: script: reading %q: %w", errdefs.ErrInvalidArgument, h.Name, err)
		}
		if total += len(b); total > MaxScriptBytes {
			return nil, fmt.Errorf("%w: script: over %d bytes", errdefs.ErrTooLarge, MaxScriptBytes)
		}
		s[name] = b
	}
	if len(s) == 0 {
		return nil, fmt.Errorf("%w: script: the tar holds no file", errdefs.ErrInvalidArgument)
	}
	for name := range s { // a file where another's directory is
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			if _, clash := s[d]; clash {
				return nil, fmt.Errorf("%w: script: %q is both a file and a directory", errdefs.ErrInvalidArgument, d)
			}
		}
	}
	return s, nil
}

func checkScriptPath(raw, name string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: script: %q %s", errdefs.ErrInvalidArgument, raw, why)
	}
	if len(name) > maxScriptPath {
		return bad(fmt.Sprintf("is over %d bytes", maxScriptPath))
	}
	parts := strings.Split(name, "/")
	if len(parts) > maxScriptDepth {
		return bad(fmt.Sprintf("is over %d levels deep", maxScriptDepth))
	}
	for _, p := range parts {
		if !pathPartRE.MatchString(p) {
			return bad("must be a relative path of [A-Za-z0-9_.-] names, none starting with \".\" or \"-\"")
		}
	}
	return nil
}

// scriptStore keeps scripts on disk: ROOT/TENANT/HASH/..., written once
// (into a temporary name, then renamed) and never changed; directories
// 0750 and files 0440 with the pool's gid, so only the pool's sandboxes
// read them, and only through the mount a request is given.
type scriptStore struct {
	root string
	gid  int // -1: unchanged
}

// dir returns the directory of tenant's script hash (not checked).
func (st scriptStore) dir(tenant, hash string) string { return filepath.Join(st.root, tenant, hash) }

// put stores s for tenant and returns its hash; storing a script already
// there is a no-op.
func (st scriptStore) put(tenant string, s Script) (string, error) {
	hash := s.Hash()
	dst := st.dir(tenant, hash)
	if _, err := os.Stat(dst); err == nil {
		return hash, nil
	}
	if err := os.MkdirAll(filepath.Join(st.root, tenant), 0o711); err != nil {
		return "", fmt.Errorf("storing script: %w", err)
	}
	if err := st.evict(tenant, MaxScriptsPerTenant-1); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Join(st.root, tenant), ".partial-")
	if err != nil {
		return "", fmt.Errorf("storing script: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, name := range s.names() {
		p := filepath.Join(tmp, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			return "", fmt.Errorf("storing script: %w", err)
		}
		if err := os.WriteFile(p, s[name], 0o440); err != nil {
			return "", fmt.Errorf("storing script: %w", err)
		}
	}
	if err := function.SecureCodeDir(tmp, st.gid); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dst); err != nil && !os.IsExist(err) && !errors.Is(err, os.ErrExist) {
		if _, serr := os.Stat(dst); serr != nil { // not a concurrent upload of the same script
			return "", fmt.Errorf("storing script: %w", err)
		}
	}
	return hash, nil
}

// has reports whether tenant has script hash, and marks it used now (its
// directory's mtime: the eviction order); errors wrap errdefs.ErrNotFound.
func (st scriptStore) has(tenant, hash string) error {
	dir := st.dir(tenant, hash)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("script %s of tenant %q: %w", hash, tenant, errdefs.ErrNotFound)
	}
	now := time.Now()
	_ = os.Chtimes(dir, now, now)
	return nil
}

// ScriptsFullError is a script upload refused because the tenant's stored scripts are all
// in recent use, so none may be evicted to make room. It wraps errdefs.ErrTooManyRequests;
// RetryAfter (the API's Retry-After) is when the least recently used one may be evicted.
type ScriptsFullError struct {
	Tenant  string
	Scripts int           // the tenant's stored scripts
	Within  time.Duration // all used within this (evictAfter)
	After   time.Duration
}

func (e *ScriptsFullError) Error() string {
	return fmt.Sprintf("tenant %q has %d scripts in this pool, all used within %v: retry after %v",
		e.Tenant, e.Scripts, e.Within, e.After.Round(time.Second))
}

func (e *ScriptsFullError) Unwrap() error { return errdefs.ErrTooManyRequests }

// RetryAfter says when the least recently used script may be evicted.
func (e *ScriptsFullError) RetryAfter() time.Duration { return e.After }

// evict removes tenant's least recently used scripts until at most keep
// remain, never one used within evictAfter. Errors: *ScriptsFullError
// (errdefs.ErrTooManyRequests) when that many are all in recent use.
func (st scriptStore) evict(tenant string, keep int) error {
	es, err := os.ReadDir(filepath.Join(st.root, tenant))
	if err != nil {
		return nil
	}
	type script struct {
		name string
		used time.Time
	}
	var all []script
	for _, e := range es {
		if info, err := e.Info(); err == nil && hashRE.MatchString(e.Name()) {
			all = append(all, script{e.Name(), info.ModTime()})
		}
	}
	if len(all) <= keep {
		return nil
	}
	sort.Slice(all, func(i, j int) bool { return all[i].used.Before(all[j].used) })
	for _, s := range all[:len(all)-keep] {
		if age := time.Since(s.used); age < evictAfter {
			return &ScriptsFullError{Tenant: tenant, Scripts: len(all), Within: evictAfter, After: evictAfter - age}
		}
		if err := os.RemoveAll(filepath.Join(st.root, tenant, s.name)); err != nil {
			return fmt.Errorf("evicting script %s: %w", s.name, err)
		}
	}
	return nil
}

// read returns the files of tenant's script hash (the fallback when no
// mount can be made).
func (st scriptStore) read(tenant, hash string) (Script, error) {
	root := st.dir(tenant, hash)
	s := Script{}
	err := filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		b, err := os.ReadFile(p)
		s[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading script %s: %w", hash, err)
	}
	return s, nil
}
