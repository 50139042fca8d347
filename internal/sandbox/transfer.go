package sandbox

// Moving a checkpoint image to another daemon: ExportCheckpoint streams it as a tar, and
// ImportCheckpoint reads such a tar as a new checkpoint of this daemon, which Restore then
// copies like any other (each copy resealed: its own id, generation, identity, entropy).
//
// The tar, in this order (docs/sandboxes.md, "Moving a checkpoint to another daemon"):
//
//	zygo-checkpoint.json   the manifest (imageManifest): the record, the guest token, the
//	                       CRC-32C of every image file
//	image/                 the image directory
//	image/PATH...          the image's files (gVisor's checkpoint.img and its page files,
//	                       Zygo's zygo-bundle.json), sorted, mode 0600, owner 0
//
// The stream is deterministic (fixed modes, owners and times), so the exporter knows its size
// and SHA-256 before it sends a byte: it writes it once to a hash, then again to the caller.
// The importer is told the SHA-256 by its caller and refuses the image unless the stream it
// read has it; it also checks each file's CRC-32C against the manifest, and every bound
// below, while it writes. What an imported checkpoint can never hold: the secrets of the
// sandbox it was taken of (an image of a sandbox with secrets is not exported: its memory
// holds their values), and a host path of any daemon (its root is a template named on the
// importer, or the default root: a manifest naming options.rootfs_dir is refused, and the
// image's engine record, gVisor's bundle, must be there and match the importer's own, host
// paths left out). Nor does it belong to a sandbox of the importer: its sandbox_id is a fresh
// id that names none (the exporter's ids are kept in CheckpointRecord.Origin), so it is never
// in a local sandbox's lineage, and a rollback by tag never finds it.

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

const (
	// ImageFormat is the version of the export tar's layout, in its manifest.
	ImageFormat = 1
	// DefaultMaxImportBytes is ManagerConfig.MaxImportBytes's default: 8 GiB of tar stream.
	DefaultMaxImportBytes = 8 << 30
	// MaxImportEntries bounds the entries of an imported tar (a gVisor image has a handful).
	MaxImportEntries = 1024
	// MaxImportDepth bounds the directory depth of an imported image file's path.
	MaxImportDepth = 16
	// ExportStallTimeout is how long an export's reader and an import's writer may go without
	// a byte moving before the API ends the call (and an export's lease on its checkpoint).
	ExportStallTimeout = 30 * time.Second
	// maxManifestBytes bounds the manifest entry.
	maxManifestBytes = 1 << 20

	manifestEntry = "zygo-checkpoint.json"
	imageEntryDir = "image/"
)

var (
	hex32RE = regexp.MustCompile(`^[0-9a-f]{32}$`) // a generation (newGeneration)
	hex64RE = regexp.MustCompile(`^[0-9a-f]{64}$`) // a guest token (newToken)
)

// imageManifest is the first entry of an export: what the checkpoint record holds, less the
// host path of its image, plus the guest token (which the image's memory holds anyway).
type imageManifest struct {
	Format     int               `json:"format"`
	ID         string            `json:"id"` // the exporter's id; the importer gives its own
	Tag        string            `json:"tag,omitempty"`
	SandboxID  string            `json:"sandbox_id"`
	Backend    string            `json:"backend"`
	Token      string            `json:"token"`
	Generation string            `json:"generation"`
	Hostname   string            `json:"hostname,omitempty"`
	Options    CreateOptions     `json:"options"`
	CreatedAt  time.Time         `json:"created_at"`
	SizeBytes  int64             `json:"size_bytes"`
	Checksums  map[string]string `json:"checksums"`
}

// ImageExport is one checkpoint image ready to be sent: its size and SHA-256 are known before
// the first byte. The Manager's holds a lease on the checkpoint (a checkpoints rm waits)
// until Close.
type ImageExport struct {
	Checkpoint CheckpointRecord
	Size       int64  // bytes of the tar stream
	SHA256     string // of the tar stream, 64 hex digits
	write      func(ctx context.Context, w io.Writer) error
	release    func()
}

// NewImageExport returns an ImageExport whose Write calls write and whose Close calls
// release (either may be nil), for other sources of images than the Manager (tests' fakes).
func NewImageExport(cp CheckpointRecord, size int64, sha256Hex string, write func(context.Context, io.Writer) error, release func()) *ImageExport {
	if write == nil {
		write = func(context.Context, io.Writer) error { return nil }
	}
	if release == nil {
		release = func() {}
	}
	return &ImageExport{Checkpoint: cp, Size: size, SHA256: sha256Hex, write: write, release: sync.OnceFunc(release)}
}

// Write writes the tar stream to w. For the Manager's, it checks each file against its
// recorded CRC-32C as it goes (a *CorruptImageError, after the bytes were written: the
// receiver's SHA-256 check refuses them); the stream is the same at every call.
func (e *ImageExport) Write(ctx context.Context, w io.Writer) error { return e.write(ctx, w) }

// Close releases the lease on the checkpoint. It may be called more than once.
func (e *ImageExport) Close() { e.release() }

// imageWriter writes the export tar of one checkpoint.
type imageWriter struct {
	cp       CheckpointRecord
	manifest []byte
	files    []string // relative paths, sorted
}

// ExportCheckpoint prepares the export of the checkpoint with that id or tag: it reads the
// image once, checking every file against its recorded CRC-32C, to learn the stream's size
// and SHA-256. The caller must Close the result. Errors wrap errdefs.ErrNotFound (no such
// checkpoint), errdefs.ErrFailedPrecondition (its sandbox held secrets; the image is lost,
// corrupted (*CorruptImageError) or has no recorded checksums) or errdefs.ErrInvalidArgument.
func (m *Manager) ExportCheckpoint(ctx context.Context, ref string) (_ *ImageExport, err error) {
	if err := ValidateCheckpointRef("checkpoint", ref); err != nil {
		return nil, err
	}
	cp, err := m.getCheckpoint(ctx, ref)
	if err != nil {
		return nil, err
	}
	switch {
	case len(cp.Options.Secrets) > 0:
		return nil, fmt.Errorf("checkpoint %s was taken of a sandbox that holds secrets, whose values are in the image: "+
			"it is not exported (docs/sandboxes.md): %w", cp.ID, errdefs.ErrFailedPrecondition)
	case cp.Options.RootfsDir != "" && cp.Options.Template == "":
		return nil, fmt.Errorf("checkpoint %s was taken of a sandbox whose root is a directory given as rootfs_dir, a host path "+
			"another daemon does not share: it is not exported; make that directory a template (zygo serve --template NAME=DIR, "+
			"on both daemons) and create the sandbox from it: %w", cp.ID, errdefs.ErrFailedPrecondition)
	case imageLost(cp):
		return nil, lostImageError(cp)
	case len(cp.Checksums) == 0:
		return nil, fmt.Errorf("checkpoint %s has no recorded checksums (taken by an older daemon): it is not exported: %w",
			cp.ID, errdefs.ErrFailedPrecondition)
	}
	release, err := m.leaseCheckpointFor(ctx, cp, leaseExport)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	opts := cp.Options
	if opts.Template != "" {
		opts.RootfsDir = "" // the importer's template of that name gives its own
	}
	opts.Lifecycle = Lifecycle{}
	man, err := json.Marshal(imageManifest{Format: ImageFormat, ID: cp.ID, Tag: cp.Tag, SandboxID: cp.SandboxID,
		Backend: cp.Backend, Token: cp.Token, Generation: cp.Generation, Hostname: cp.Hostname, Options: opts,
		CreatedAt: cp.CreatedAt.UTC(), SizeBytes: cp.SizeBytes, Checksums: cp.Checksums})
	if err != nil {
		return nil, fmt.Errorf("encoding the manifest of %s: %w", cp.ID, err)
	}
	iw := &imageWriter{cp: cp, manifest: man}
	for f := range cp.Checksums {
		iw.files = append(iw.files, f)
	}
	slices.Sort(iw.files)
	h := sha256.New()
	cw := &countWriter{w: h}
	if err := iw.write(ctx, cw); err != nil {
		return nil, err
	}
	return NewImageExport(cp, cw.n, hex.EncodeToString(h.Sum(nil)), iw.write, release), nil
}

// write writes the tar stream to w, checking each file's CRC-32C.
func (e *imageWriter) write(ctx context.Context, w io.Writer) error {
	cp := e.cp
	mtime := cp.CreatedAt.UTC().Truncate(time.Second)
	tw := tar.NewWriter(w)
	hdr := func(name string, typ byte, mode, size int64) *tar.Header {
		return &tar.Header{Name: name, Typeflag: typ, Mode: mode, Size: size, ModTime: mtime, Format: tar.FormatPAX}
	}
	if err := tw.WriteHeader(hdr(manifestEntry, tar.TypeReg, 0o600, int64(len(e.manifest)))); err != nil {
		return err
	}
	if _, err := tw.Write(e.manifest); err != nil {
		return err
	}
	if err := tw.WriteHeader(hdr(imageEntryDir, tar.TypeDir, 0o700, 0)); err != nil {
		return err
	}
	dirs := map[string]bool{}
	for _, f := range e.files {
		if err := ctx.Err(); err != nil {
			return err
		}
		for d := path.Dir(f); d != "."; d = path.Dir(d) { // parents first, once (sorted files)
			if !dirs[d] {
				var parents []string
				for p := d; p != "." && !dirs[p]; p = path.Dir(p) {
					parents = append(parents, p)
				}
				for i := len(parents) - 1; i >= 0; i-- {
					dirs[parents[i]] = true
					if err := tw.WriteHeader(hdr(imageEntryDir+parents[i]+"/", tar.TypeDir, 0o700, 0)); err != nil {
						return err
					}
				}
				break
			}
		}
		if err := e.writeFile(tw, hdr, f); err != nil {
			return err
		}
	}
	return tw.Close()
}

// writeFile writes one image file's entry, checking its CRC-32C.
func (e *imageWriter) writeFile(tw *tar.Writer, hdr func(string, byte, int64, int64) *tar.Header, f string) error {
	cp := e.cp
	fh, err := os.Open(filepath.Join(cp.Dir, filepath.FromSlash(f)))
	if err != nil {
		return &CorruptImageError{Checkpoint: cp.ID, File: f, Reason: errnoText(err)}
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return &CorruptImageError{Checkpoint: cp.ID, File: f, Reason: "not a regular file"}
	}
	if err := tw.WriteHeader(hdr(imageEntryDir+f, tar.TypeReg, 0o600, st.Size())); err != nil {
		return err
	}
	crc := crc32.New(castagnoli)
	n, err := io.Copy(io.MultiWriter(tw, crc), io.LimitReader(fh, st.Size()))
	if err != nil {
		return fmt.Errorf("sending %s of checkpoint %s: %w", f, cp.ID, err)
	}
	if n != st.Size() {
		return &CorruptImageError{Checkpoint: cp.ID, File: f, Reason: "shrank while it was read"}
	}
	if got := fmt.Sprintf("%s%08x", checksumPrefix, crc.Sum32()); got != cp.Checksums[f] {
		return &CorruptImageError{Checkpoint: cp.ID, File: f, Reason: fmt.Sprintf("checksum %s, recorded %s", got, cp.Checksums[f])}
	}
	return nil
}

// countWriter counts what it passes on.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// ImportOptions configure ImportCheckpoint.
type ImportOptions struct {
	// SHA256 is the stream's SHA-256 as the exporter announced it (64 hex digits). Required.
	SHA256 string
	// Tag is the new checkpoint's tag; "" keeps the image's.
	Tag string
}

// ImportCheckpoint reads an export tar (ExportCheckpoint) from r — untrusted input — into a
// new checkpoint of this daemon, with an id of its own, and returns its record. Nothing of it
// is usable, or left behind, until every check passed: the stream's SHA-256 equals
// opts.SHA256; it is at most ManagerConfig.MaxImportBytes and MaxImportEntries entries; its
// entries are the manifest first, then only directories and regular files at relative paths
// under image/ (no links, devices, "..", absolute paths or duplicates; at most
// MaxImportDepth deep); the files are exactly those of the manifest, each with its CRC-32C;
// the manifest's options pass Create's checks, name no secrets, and its backend and
// template exist here. Errors: errdefs.ErrInvalidArgument naming what is wrong (the field, or
// the entry), errdefs.ErrTooLarge naming the bound, errdefs.ErrFailedPrecondition when this
// daemon cannot restore it (no such backend or template, no network).
func (m *Manager) ImportCheckpoint(ctx context.Context, r io.Reader, opts ImportOptions) (_ CheckpointRecord, err error) {
	want, herr := hex.DecodeString(opts.SHA256)
	if herr != nil || len(want) != sha256.Size {
		return CheckpointRecord{}, invalid("sha256", "%s: want the 64 hex digits of the image's SHA-256 (its exporter's X-Zygo-Image-Sha256)", short(opts.SHA256))
	}
	if err := ValidateTag(opts.Tag); err != nil {
		return CheckpointRecord{}, err
	}
	id := newID("cp-", 8)
	tmp := filepath.Join(m.cfg.ImageDir, ".import-"+id) // a stray one is removed at the next start
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return CheckpointRecord{}, fmt.Errorf("making the import dir: %w", err)
	}
	dir := filepath.Join(m.cfg.ImageDir, id)
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
			_ = os.RemoveAll(dir)
		}
	}()
	h := sha256.New()
	lr := &boundReader{r: io.TeeReader(r, h), left: m.cfg.MaxImportBytes, max: m.cfg.MaxImportBytes}
	man, err := m.untarImage(ctx, lr, tmp)
	if err != nil {
		return CheckpointRecord{}, err
	}
	if _, err := io.Copy(io.Discard, lr); err != nil { // the tar's padding counts in the hash
		return CheckpointRecord{}, err
	}
	if got := h.Sum(nil); !slices.Equal(got, want) {
		return CheckpointRecord{}, invalid("sha256", "the image read has SHA-256 %x, not the %s announced: it was changed or cut on the way", got, opts.SHA256)
	}
	// A sandbox id of its own, naming no sandbox here: the manifest's names one of the
	// exporter's, which may be one of ours too (a lineage, a rollback's tag, a copy's parent).
	cp := CheckpointRecord{ID: id, Tag: man.Tag, SandboxID: newID("sb-", 8), Backend: man.Backend, Dir: dir,
		Token: man.Token, Generation: man.Generation, Hostname: man.Hostname, Options: man.Options,
		CreatedAt: m.cfg.Now(), Checksums: man.Checksums, SizeBytes: man.SizeBytes,
		Origin: &CheckpointOrigin{CheckpointID: man.ID, SandboxID: man.SandboxID, Tag: man.Tag}}
	if opts.Tag != "" {
		cp.Tag = opts.Tag
	}
	if err := m.checkImportedImage(tmp, cp); err != nil {
		return CheckpointRecord{}, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return CheckpointRecord{}, fmt.Errorf("placing imported image %s: %w", id, err)
	}
	if err := m.reg.PutCheckpoint(ctx, cp); err != nil {
		return CheckpointRecord{}, fmt.Errorf("saving imported checkpoint %s: %w", id, err)
	}
	m.log.Info("imported checkpoint", "checkpoint", id, "from", man.ID, "bytes", lr.max-lr.left)
	return cp, nil
}

// checkImportedImage asks cp's backend, when it can tell (ImportChecker), whether the image
// in dir would restore here as an imported image: what it needs is there (gVisor: its bundle)
// and matches what this daemon would run. It returns an error wrapping
// errdefs.ErrInvalidArgument naming the image otherwise.
func (m *Manager) checkImportedImage(dir string, cp CheckpointRecord) error {
	be, err := m.bes.named(cp.Backend)
	if err != nil {
		return err
	}
	ic, ok := be.(ImportChecker)
	if !ok {
		return nil
	}
	var uid uint32
	if m.cfg.HostIDs != nil {
		uid = 1 // any but 0: each copy's own uid, which the check leaves out, but not none
	}
	var netAt *NetAttachment
	if cp.Options.Network.Mode == NetworkEgress {
		netAt = &NetAttachment{}
	}
	if err := ic.CheckImportedImage(dir, restoreSpec(cp, newEngineID(cp.SandboxID), uid, netAt)); err != nil {
		return invalid("image", "would not restore on this daemon: %s", errdefs.Message(err))
	}
	return nil
}

// boundReader fails with errdefs.ErrTooLarge once more than max bytes were read.
type boundReader struct {
	r         io.Reader
	left, max int64
}

func (b *boundReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a stream of exactly max bytes from a longer one.
		var one [1]byte
		if n, _ := b.r.Read(one[:]); n == 0 {
			return 0, io.EOF
		}
		return 0, importBoundError(b.max)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// tooLarge is the error of an image past the Manager's import bound.
func (m *Manager) tooLarge() error { return importBoundError(m.cfg.MaxImportBytes) }

func importBoundError(max int64) error {
	return fmt.Errorf("the image is larger than this daemon's import bound of %d MiB (zygo serve --checkpoint-import-max-mib): %w",
		max>>20, errdefs.ErrTooLarge)
}

// notSparse refuses a sparse tar entry (GNU's old sparse type, or PAX GNU.sparse records):
// archive/tar expands a sparse file's holes into zeros, so a few bytes of stream would write
// as many bytes to disk as the entry's size says. A Zygo export never writes one.
func notSparse(h *tar.Header) error {
	if h.Typeflag == tar.TypeGNUSparse {
		return invalid("image", "entry %s is a sparse file: not imported (want the tar of `zygo sandbox checkpoints export`)", short(h.Name))
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return invalid("image", "entry %s is a sparse file (PAX record %s): not imported (want the tar of `zygo sandbox checkpoints export`)",
				short(h.Name), short(k))
		}
	}
	return nil
}

// untarImage reads the tar from r into dir (empty, the Manager's) and returns its manifest,
// checked. On error dir may hold part of the image; the caller removes it.
func (m *Manager) untarImage(ctx context.Context, r io.Reader, dir string) (imageManifest, error) {
	var man imageManifest
	tr := tar.NewReader(r)
	seen := map[string]bool{}
	var total int64
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return man, err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return man, badImage(err, "reading entry %d", n)
		}
		if n >= MaxImportEntries {
			return man, fmt.Errorf("image: more than %d entries: %w", MaxImportEntries, errdefs.ErrTooLarge)
		}
		if n == 0 {
			if man, err = readManifest(h, tr); err != nil {
				return man, err
			}
			if err := m.checkManifest(&man); err != nil {
				return man, err
			}
			continue
		}
		if err := notSparse(h); err != nil {
			return man, err
		}
		rel, err := importPath(h)
		if err != nil {
			return man, err
		}
		if seen[rel] {
			return man, invalid("image", "entry %s appears twice", short(h.Name))
		}
		seen[rel] = true
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(rel)), 0o700); err != nil {
				return man, fmt.Errorf("making %s of the imported image: %w", rel, err)
			}
			continue
		}
		want, ok := man.Checksums[rel]
		if !ok {
			return man, invalid("image", "file %s is not in the manifest's checksums", short(rel))
		}
		if total += h.Size; total > man.SizeBytes {
			return man, invalid("image", "its files hold more than the manifest's size_bytes %d", man.SizeBytes)
		}
		if total > m.cfg.MaxImportBytes { // what is written to disk, whatever the stream's size
			return man, m.tooLarge()
		}
		if err := writeImportFile(tr, filepath.Join(dir, filepath.FromSlash(rel)), rel, h.Size, want); err != nil {
			return man, err
		}
	}
	if len(seen) == 0 && man.Format == 0 {
		return man, invalid("image", "is empty: want the tar of `zygo sandbox checkpoints export`")
	}
	for f := range man.Checksums {
		if !seen[f] {
			return man, invalid("image", "file %s of the manifest is missing", short(f))
		}
	}
	if total != man.SizeBytes {
		return man, invalid("image", "its files hold %d bytes, the manifest says size_bytes %d", total, man.SizeBytes)
	}
	return man, nil
}

// badImage is an error reading the tar: the caller's bound when that is what ended it, else
// a malformed stream (errdefs.ErrInvalidArgument).
func badImage(err error, format string, args ...any) error {
	if errors.Is(err, errdefs.ErrTooLarge) {
		return err
	}
	return invalid("image", "%s: %v (want the tar of `zygo sandbox checkpoints export`)", fmt.Sprintf(format, args...), err)
}

// readManifest reads and decodes the manifest entry h.
func readManifest(h *tar.Header, tr io.Reader) (imageManifest, error) {
	var man imageManifest
	if h.Name != manifestEntry || h.Typeflag != tar.TypeReg {
		return man, invalid("image", "the first entry is %s: want the manifest %s", short(h.Name), manifestEntry)
	}
	if h.Size > maxManifestBytes {
		return man, fmt.Errorf("image: the manifest is %d bytes: at most %d: %w", h.Size, maxManifestBytes, errdefs.ErrTooLarge)
	}
	raw, err := io.ReadAll(io.LimitReader(tr, maxManifestBytes))
	if err != nil {
		return man, badImage(err, "reading the manifest")
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&man); err != nil {
		return man, invalid("manifest", "%v", err)
	}
	return man, nil
}

// checkManifest checks what an imported manifest says and fills the options this daemon
// decides (the template's root); see ImportCheckpoint.
func (m *Manager) checkManifest(man *imageManifest) error {
	switch {
	case man.Format != ImageFormat:
		return invalid("manifest.format", "%d: this daemon reads format %d", man.Format, ImageFormat)
	case !idRE.MatchString(man.ID) || !strings.HasPrefix(man.ID, "cp-"):
		return invalid("manifest.id", "%s is not a checkpoint id", short(man.ID))
	case !idRE.MatchString(man.SandboxID) || !strings.HasPrefix(man.SandboxID, "sb-"):
		return invalid("manifest.sandbox_id", "%s is not a sandbox id", short(man.SandboxID))
	case !hex32RE.MatchString(man.Generation):
		return invalid("manifest.generation", "%s: want 32 hex digits", short(man.Generation))
	case !hex64RE.MatchString(man.Token):
		return invalid("manifest.token", "want 64 hex digits")
	case man.SizeBytes < 0:
		return invalid("manifest.size_bytes", "%d is negative", man.SizeBytes)
	case man.SizeBytes > m.cfg.MaxImportBytes:
		return fmt.Errorf("manifest.size_bytes: %d: %w", man.SizeBytes, m.tooLarge())
	case man.Options.RootfsDir != "":
		return invalid("manifest.options.rootfs_dir", "%s: an imported image carries no host path; its root is the template "+
			"named in options.template (resolved on this daemon) or the default root", short(man.Options.RootfsDir))
	case len(man.Checksums) == 0 || len(man.Checksums) > MaxImportEntries:
		return invalid("manifest.checksums", "has %d files: want 1..%d", len(man.Checksums), MaxImportEntries)
	case len(man.Options.Secrets) > 0:
		return invalid("manifest.options.secrets", "the image names secrets: an image of a sandbox holding secrets is never imported")
	case len(man.Hostname) > maxNameLen:
		return invalid("manifest.hostname", "is %d bytes: at most %d", len(man.Hostname), maxNameLen)
	}
	if err := ValidateTag(man.Tag); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	for f, sum := range man.Checksums {
		if _, err := cleanImagePath(f); err != nil {
			return fmt.Errorf("manifest.checksums: %w", err)
		}
		if !strings.HasPrefix(sum, checksumPrefix) || len(sum) != len(checksumPrefix)+8 {
			return invalid("manifest.checksums", "%s: %s is not crc32c:8 hex digits", short(f), short(sum))
		}
	}
	man.Options.Lifecycle = Lifecycle{}
	if err := validateCreate(man.Options); err != nil {
		return fmt.Errorf("manifest.options: %w", err)
	}
	if _, err := m.bes.named(man.Backend); err != nil {
		return fmt.Errorf("manifest.backend %s: %w", short(man.Backend), err)
	}
	if man.Options.Template != "" { // the root is this daemon's template of that name
		t, err := m.template(man.Options.Template)
		if err != nil {
			return fmt.Errorf("manifest.options.template: this daemon has no such template, which the image's root needs: %w: %w",
				err, errdefs.ErrFailedPrecondition)
		}
		man.Options.RootfsDir = t.RootfsDir
	}
	if err := rootfsClearOf(man.Options.RootfsDir, append([]string{m.cfg.ImageDir, m.cfg.SecretImageDir}, m.cfg.ProtectedDirs...)); err != nil {
		return fmt.Errorf("manifest.options: %w", err)
	}
	if err := ValidateRootfs(man.Options.RootfsDir); err != nil {
		return fmt.Errorf("manifest.options: %w", err)
	}
	if err := m.rootfsReachable(man.Options.RootfsDir); err != nil {
		return fmt.Errorf("manifest.options: %w", err)
	}
	if _, err := m.networkDefaults(man.Options.Network); err != nil {
		return fmt.Errorf("manifest.options: %w", err)
	}
	return nil
}

// importPath returns the path, relative to the image dir, of a tar entry that may be in an
// imported image: a directory or regular file under image/ (ErrInvalidArgument naming the
// entry otherwise).
func importPath(h *tar.Header) (string, error) {
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeDir:
	default:
		return "", invalid("image", "entry %s is of type %q: only regular files and directories are imported (no links, devices or fifos)", short(h.Name), string(h.Typeflag))
	}
	name := h.Name
	if h.Typeflag == tar.TypeDir {
		name = strings.TrimSuffix(name, "/")
	}
	if name == strings.TrimSuffix(imageEntryDir, "/") {
		return ".", nil
	}
	rel, ok := strings.CutPrefix(name, imageEntryDir)
	if !ok {
		return "", invalid("image", "entry %s is outside %s", short(h.Name), imageEntryDir)
	}
	rel, err := cleanImagePath(rel)
	if err != nil {
		return "", fmt.Errorf("entry %s: %w", short(h.Name), err)
	}
	if h.Size < 0 || (h.Typeflag == tar.TypeDir && h.Size != 0) {
		return "", invalid("image", "entry %s has size %d", short(h.Name), h.Size)
	}
	return rel, nil
}

// cleanImagePath checks a slash path relative to an image dir: not empty, not absolute, no
// "." or ".." or empty component, no NUL or backslash, at most MaxImportDepth components of
// at most MaxPathComponentBytes.
func cleanImagePath(rel string) (string, error) {
	if rel == "" || strings.HasPrefix(rel, "/") || strings.ContainsAny(rel, "\x00\\") || len(rel) > MaxPathBytes {
		return "", invalid("image", "path %s is not a relative path inside the image", short(rel))
	}
	parts := strings.Split(rel, "/")
	if len(parts) > MaxImportDepth {
		return "", invalid("image", "path %s is %d deep: at most %d", short(rel), len(parts), MaxImportDepth)
	}
	for _, p := range parts {
		if p == "" || p == "." || p == ".." || len(p) > MaxPathComponentBytes {
			return "", invalid("image", "path %s has a component %s: not allowed", short(rel), short(p))
		}
	}
	return rel, nil
}

// writeImportFile writes size bytes of r to the new file p (its parents made), checking
// their CRC-32C against want.
func writeImportFile(r io.Reader, p, rel string, size int64, want string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("making the parent of %s: %w", rel, err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("creating %s of the imported image: %w", rel, err)
	}
	crc := crc32.New(castagnoli)
	n, err := io.Copy(io.MultiWriter(f, crc), io.LimitReader(r, size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return badImage(err, "reading %s", rel)
	}
	if n != size {
		return invalid("image", "file %s ends after %d of its %d bytes", short(rel), n, size)
	}
	if got := sumOf(crc); got != want {
		return invalid("image", "file %s has checksum %s, the manifest says %s", short(rel), got, want)
	}
	return nil
}

func sumOf(h hash.Hash32) string { return fmt.Sprintf("%s%08x", checksumPrefix, h.Sum32()) }
