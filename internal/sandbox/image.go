package sandbox

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// Image integrity. Every file of a checkpoint image gets a CRC-32C (Castagnoli) at checkpoint
// time, kept in the checkpoint record (CheckpointRecord.Checksums), and the image is checked
// against them once before each restore (fork, rollback). Why CRC-32C and not SHA-256: the
// record and the image both live on the daemon's host, so the check is against corruption
// (a bad disk, a truncated copy, a stray write), not against someone who could rewrite both;
// and on a real 265 MiB image here SHA-256 cost 0.71 ms/MiB (190 ms, more than the 120 ms
// checkpoint itself) against CRC-32C's 0.15 ms/MiB (40 ms). docs/sandboxes.md has the numbers.

// checksumPrefix names the algorithm in every checksum value, so another can be added later.
const checksumPrefix = "crc32c:"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CorruptImageError is a checkpoint image that does not match the checksums recorded when it
// was taken. It unwraps to errdefs.ErrFailedPrecondition: the checkpoint cannot be used.
type CorruptImageError struct {
	Checkpoint string // checkpoint id
	File       string // path inside the image dir
	Reason     string // what is wrong with it
}

func (e *CorruptImageError) Error() string {
	return fmt.Sprintf("checkpoint %s is corrupted: %s: %s (remove it with `zygo sandbox checkpoints rm %s`)",
		e.Checkpoint, e.File, e.Reason, e.Checkpoint)
}

func (e *CorruptImageError) Unwrap() error { return errdefs.ErrFailedPrecondition }

// checksumFile returns the CRC-32C of the file at p as "crc32c:8 hex digits", and its size.
func checksumFile(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, f)
	if err != nil {
		return "", n, err
	}
	return fmt.Sprintf("%s%08x", checksumPrefix, h.Sum32()), n, nil
}

// imageFiles returns the regular files under dir, as slash paths relative to it, sorted.
func imageFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}

// checksumImage returns the checksum of every file of the image in dir (by relative path) and
// their total size in bytes.
func checksumImage(dir string) (map[string]string, int64, error) {
	files, err := imageFiles(dir)
	if err != nil {
		return nil, 0, fmt.Errorf("listing image %s: %w", dir, err)
	}
	sums := make(map[string]string, len(files))
	var total int64
	for _, f := range files {
		sum, n, err := checksumFile(filepath.Join(dir, filepath.FromSlash(f)))
		if err != nil {
			return nil, 0, fmt.Errorf("checksumming %s of image %s: %w", f, dir, err)
		}
		sums[f] = sum
		total += n
	}
	return sums, total, nil
}

// stillThere returns ErrNotFound when cp's record is gone: a checkpoints rm that raced the
// caller removes the image's files, which must not read as corruption.
func (m *Manager) stillThere(ctx context.Context, cp CheckpointRecord) error {
	if _, err := m.reg.GetCheckpoint(ctx, cp.ID); errdefs.IsNotFound(err) {
		return fmt.Errorf("checkpoint %s was removed: %w", cp.ID, errdefs.ErrNotFound)
	}
	return nil
}

// verifyImage checks cp's image against its recorded checksums: the same files, each with
// its checksum. It returns a *CorruptImageError naming the checkpoint and the first bad file.
// A checkpoint recorded before checksums existed (none recorded) is not checked; that is
// logged. When the checkpoint was removed meanwhile (its record gone), it returns an error
// wrapping errdefs.ErrNotFound instead, and when the image is lost (its directory gone: an
// in-memory image after a reboot), one wrapping errdefs.ErrFailedPrecondition.
func (m *Manager) verifyImage(ctx context.Context, cp CheckpointRecord) error {
	if imageLost(cp) {
		if gone := m.stillThere(ctx, cp); gone != nil {
			return gone
		}
		return lostImageError(cp)
	}
	err := m.verifyImageFiles(ctx, cp)
	var ce *CorruptImageError
	if errors.As(err, &ce) {
		if gone := m.stillThere(ctx, cp); gone != nil {
			return gone
		}
	}
	return err
}

func (m *Manager) verifyImageFiles(ctx context.Context, cp CheckpointRecord) error {
	if len(cp.Checksums) == 0 {
		m.log.Warn("checkpoint has no recorded checksums (taken by an older daemon); restoring it unverified",
			"checkpoint", cp.ID)
		return nil
	}
	files, err := imageFiles(cp.Dir)
	if err != nil {
		return &CorruptImageError{Checkpoint: cp.ID, File: ".", Reason: "listing the image: " + errnoText(err)} // no host path
	}
	for _, f := range files {
		if _, ok := cp.Checksums[f]; !ok {
			return &CorruptImageError{Checkpoint: cp.ID, File: f, Reason: "not part of the image when it was taken"}
		}
	}
	want := make([]string, 0, len(cp.Checksums))
	for f := range cp.Checksums {
		want = append(want, f)
	}
	slices.Sort(want)
	for _, f := range want {
		if err := ctx.Err(); err != nil {
			return err
		}
		got, _, err := checksumFile(filepath.Join(cp.Dir, filepath.FromSlash(f)))
		if errors.Is(err, fs.ErrNotExist) {
			return &CorruptImageError{Checkpoint: cp.ID, File: f, Reason: "missing"}
		}
		if err != nil {
			return &CorruptImageError{Checkpoint: cp.ID, File: f, Reason: errnoText(err)}
		}
		if got != cp.Checksums[f] {
			return &CorruptImageError{Checkpoint: cp.ID, File: f,
				Reason: fmt.Sprintf("checksum %s, recorded %s", got, cp.Checksums[f])}
		}
	}
	return nil
}
