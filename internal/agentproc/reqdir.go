package agentproc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/nsbox"
	"github.com/zygo-run/zygo/internal/redact"
	"github.com/zygo-run/zygo/internal/untrusted"
)

// A request directory is the daemon's (root's, mode 01733: the sandbox can make
// names in it, not list it, and cannot chmod it, utime it or set its xattrs:
// every request of a zygote runs as the one sandbox uid, and a request's
// Landlock domain refuses it reading or changing files of another's directory
// but has no right for those three); its tmp/ is the sandbox's (0700). The
// code of the request can still replace any name in it (result.json, stdout,
// stderr, tmp) with a symlink, a FIFO, a hard link, a directory or a huge
// sparse file, at any moment. The supervisor (root) therefore never
// touches a name in it by path: every open, write, chown and removal goes
// through an untrusted.Dir (no symlink at any component, regular single-link
// files only, never blocking, bounded reads). Its parent, RunDir/req, is the
// daemon's (mode 0711): the sandbox can neither list nor rename what is in it,
// so the directory a token names is the one the supervisor made.

// requestDir is one request's directory, open from the moment it is made
// (ahead of demand with a pre-forked pool) until it is removed.
type requestDir struct {
	name          string // the token
	host, sandbox string // for messages and for the GO message; never read through

	root  *untrusted.Dir // RunDir/req, the daemon's: the zygote's (Process.root), never closed here
	files *untrusted.Dir // RunDir/req/TOKEN, the daemon's (01733); owned
}

// newDir creates a request directory (mode 01733, the daemon's) with tmp/
// inside (0700, owned by the sandbox's host uid), under an unguessable name,
// and returns it open. Nothing is left behind on error.
func (z *Process) newDir() (d requestDir, err error) {
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return requestDir{}, err
	}
	d = requestDir{name: hex.EncodeToString(tok[:]), root: z.root}
	d.host, d.sandbox = filepath.Join(z.reqRoot, d.name), nsbox.ReqDir+"/"+d.name
	if err := d.create(); err != nil {
		return requestDir{}, err
	}
	defer func() {
		if err != nil {
			_ = d.remove(context.Background())
		}
	}()
	if err := d.files.Mkdir("tmp", 0o700); err != nil {
		return d, fmt.Errorf("creating request tmp: %w", err)
	}
	// Sticky: a user xattr on it is its owner's alone (xattr(7)); the umask took write from
	// group and others.
	if err := d.files.Chmod(0o1733); err != nil {
		return d, fmt.Errorf("making request dir writable by the sandbox: %w", err)
	}
	if uid := int(z.spec.Box.HostUID); uid != 0 {
		if err := d.files.Chown("tmp", uid, uid); err != nil {
			return d, fmt.Errorf("chowning request tmp: %w", err)
		}
	}
	return d, nil
}

// create makes the request directory in root and opens it. On error
// nothing is left.
func (d *requestDir) create() error {
	if err := d.root.Mkdir(d.name, 0o700); err != nil {
		return fmt.Errorf("creating request dir: %w", err)
	}
	files, err := d.root.Sub(d.name)
	if err != nil {
		_ = d.root.Remove(d.name)
		return fmt.Errorf("opening request dir: %w", err)
	}
	d.files = files
	return nil
}

// remove deletes the request directory and all the sandbox left in it,
// without following anything, bounded by ctx, through its own descriptor
// (which it closes). It is a no-op on a directory that is not open.
func (d *requestDir) remove(ctx context.Context) error {
	if d.files == nil {
		return nil
	}
	files := d.files
	d.files = nil
	return d.root.RemoveSub(ctx, d.name, files)
}

// errNotItsResult is the failure of a request whose result.json is not a
// regular file of its own (a symlink, FIFO, device, directory, hard link).
var errNotItsResult = errors.New("result.json is not a regular file the request wrote; not read")

// readResult reads and parses result.json from d, at most max bytes
// (default 6 MiB): over it, an error wrapping errdefs.ErrTooLarge; anything
// but a regular single-link file, errNotItsResult; missing, os.ErrNotExist.
// The errors name no host path.
func readResult(ctx context.Context, d *untrusted.Dir, max int64) (*resultFile, error) {
	if max <= 0 {
		max = 6 << 20
	}
	b, err := d.ReadFile(ctx, "result.json", max)
	switch {
	case errors.Is(err, errdefs.ErrTooLarge):
		return nil, fmt.Errorf("%w: response exceeds max_response_kib=%d", errdefs.ErrTooLarge, max>>10)
	case errors.Is(err, untrusted.ErrNotRegular):
		return nil, errNotItsResult
	case errors.Is(err, os.ErrNotExist):
		return nil, os.ErrNotExist
	case err != nil:
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the errno, not the host path
		}
		return nil, fmt.Errorf("reading result.json: %w", err)
	}
	return decodeResult(b)
}

// decodeResult parses the bytes of a result.json.
func decodeResult(b []byte) (*resultFile, error) {
	var rf resultFile
	if err := json.Unmarshal(b, &rf); err != nil {
		return nil, fmt.Errorf("malformed result: %w", err)
	}
	return &rf, nil
}

// readLines returns the lines of d's file name (stdout or stderr): its
// head, redacted with r as one text, bounded in bytes and lines, and a note
// of what was dropped (streamLog). It reads at most maxLogBytes+r.Span()-1
// bytes, whatever the file's size. A name that is anything but a regular
// single-link file is not read; its one line says so. Missing: nil.
func readLines(ctx context.Context, d *untrusted.Dir, name string, r *redact.Redactor) []string {
	if ctx.Err() != nil {
		return nil
	}
	s := newStreamLog(r)
	b, size, err := d.Head(ctx, name, int64(s.keep))
	if errors.Is(err, untrusted.ErrNotRegular) {
		return []string{fmt.Sprintf("[zygo: %s is not a regular file the request wrote; not read]", name)}
	}
	if err != nil {
		return nil
	}
	s.kept, s.written = b, max(int64(len(b)), size)
	if s.written == 0 {
		return nil
	}
	return s.lines(name, r)
}

// removeRunTree removes the zygote's run directory and everything the sandbox
// left in it (its /tmp, request directories), walking by descriptor from the
// run directory's parent (the daemon's), never following a link.
func (z *Process) removeRunTree(ctx context.Context) error {
	parent, err := untrusted.OpenDir(filepath.Dir(z.spec.RunDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing run dir: %w", err)
	}
	defer parent.Close()
	return parent.RemoveAll(ctx, filepath.Base(z.spec.RunDir))
}
