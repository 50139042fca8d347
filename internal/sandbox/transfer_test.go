package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// exportBytes exports ref from m and returns the stream, checking the size and SHA-256 the
// export announced against it.
func exportBytes(t *testing.T, m *Manager, ref string) ([]byte, string) {
	t.Helper()
	ctx := context.Background()
	e, err := m.ExportCheckpoint(ctx, ref)
	if err != nil {
		t.Fatalf("ExportCheckpoint(%s): %v", ref, err)
	}
	defer e.Close()
	var buf bytes.Buffer
	if err := e.Write(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	if int64(buf.Len()) != e.Size || hex.EncodeToString(sum[:]) != e.SHA256 {
		t.Fatalf("export announced %d bytes sha256 %s; sent %d bytes sha256 %x", e.Size, e.SHA256, buf.Len(), sum)
	}
	return buf.Bytes(), e.SHA256
}

func TestExportImportRestore(t *testing.T) {
	ctx := context.Background()
	a := newTestManager(t, newFake(), NewMemRegistry(), nil)
	src, err := a.Create(ctx, CreateOptions{Name: "src", Env: []string{"A=1"}})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := a.Checkpoint(ctx, src.ID, "moved")
	if err != nil {
		t.Fatal(err)
	}
	raw, sum := exportBytes(t, a, "moved")
	again, _ := exportBytes(t, a, cp.ID)
	if !bytes.Equal(raw, again) {
		t.Fatal("two exports of one checkpoint differ: the stream must be deterministic")
	}

	breg := NewMemRegistry()
	b := newTestManager(t, newFake(), breg, nil)
	imp, err := b.ImportCheckpoint(ctx, bytes.NewReader(raw), ImportOptions{SHA256: sum})
	if err != nil {
		t.Fatalf("ImportCheckpoint: %v", err)
	}
	if imp.ID == cp.ID || imp.Tag != "moved" || imp.Generation != cp.Generation || imp.SizeBytes != cp.SizeBytes ||
		imp.Token != cp.Token || imp.Options.Env[0] != "A=1" || !idRE.MatchString(imp.SandboxID) || imp.SandboxID == src.ID ||
		imp.Origin == nil || *imp.Origin != (CheckpointOrigin{CheckpointID: cp.ID, SandboxID: src.ID, Tag: "moved"}) {
		t.Errorf("imported record %+v (origin %+v); exported %+v", imp, imp.Origin, cp)
	}
	if back, err := breg.GetCheckpoint(ctx, imp.ID); err != nil || back.Origin == nil || *back.Origin != *imp.Origin {
		t.Errorf("stored import %+v, %v: want its origin kept", back, err)
	}
	got, err := os.ReadFile(filepath.Join(imp.Dir, "checkpoint.img"))
	want, _ := os.ReadFile(filepath.Join(cp.Dir, "checkpoint.img"))
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("imported image file = %q, %v; want %q", got, err, want)
	}
	kid, err := b.Restore(ctx, imp.ID, RestoreOptions{})
	if err != nil {
		t.Fatalf("Restore of the import: %v", err)
	}
	if kid.Generation == "" || kid.Generation == cp.Generation || kid.CheckpointID != imp.ID || kid.ParentID != imp.SandboxID {
		t.Errorf("restored copy %+v: want its own generation, from %s", kid, imp.ID)
	}
	// The imported one is a checkpoint like another: held while its copy runs, then removable.
	if err := b.RemoveCheckpoint(ctx, imp.ID); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("RemoveCheckpoint while a copy runs = %v", err)
	}
	if err := b.Remove(ctx, kid.ID); err != nil {
		t.Fatal(err)
	}
	if err := b.RemoveCheckpoint(ctx, imp.ID); err != nil {
		t.Errorf("RemoveCheckpoint: %v", err)
	}
}

func TestExportRefusesSecretsAndLost(t *testing.T) {
	ctx := context.Background()
	reg := NewMemRegistry()
	m := newTestManager(t, newFake(), reg, nil)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "checkpoint.img"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	sec := CheckpointRecord{ID: "cp-00000000000000aa", SandboxID: "sb-00000000000000aa", Dir: dir,
		Options: CreateOptions{Secrets: []string{"db"}}, Checksums: map[string]string{"checkpoint.img": "crc32c:00000000"}}
	lost := CheckpointRecord{ID: "cp-00000000000000bb", SandboxID: "sb-00000000000000aa", Dir: filepath.Join(dir, "gone"),
		Checksums: map[string]string{"checkpoint.img": "crc32c:00000000"}}
	for _, cp := range []CheckpointRecord{sec, lost} {
		if err := reg.PutCheckpoint(ctx, cp); err != nil {
			t.Fatal(err)
		}
		if _, err := m.ExportCheckpoint(ctx, cp.ID); !errdefs.IsFailedPrecondition(err) {
			t.Errorf("export of %s = %v, want failed precondition", cp.ID, err)
		}
	}
	if _, err := m.ExportCheckpoint(ctx, "cp-00000000000000cc"); !errdefs.IsNotFound(err) {
		t.Errorf("export of an unknown checkpoint = %v", err)
	}
}

// tarEntry is one tar entry of a crafted image.
type tarEntry struct {
	hdr  tar.Header
	body []byte
}

func file(name string, body []byte) tarEntry {
	return tarEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(body))}, body: body}
}

func crcOf(b []byte) string { return fmt.Sprintf("crc32c:%08x", crc32.Checksum(b, castagnoli)) }

// craft returns the tar of entries and its SHA-256.
func craft(t *testing.T, entries []tarEntry) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(sum[:])
}

// goodManifest is a manifest for files (path → content), changed by edit.
func goodManifest(t *testing.T, files map[string][]byte, edit func(*imageManifest)) tarEntry {
	t.Helper()
	man := imageManifest{Format: ImageFormat, ID: "cp-0123456789abcdef", SandboxID: "sb-0123456789abcdef",
		Backend: "fake", Token: strings.Repeat("ab", 32), Generation: strings.Repeat("cd", 16),
		CreatedAt: time.Unix(1, 0).UTC(), Checksums: map[string]string{}}
	for p, b := range files {
		man.Checksums[p] = crcOf(b)
		man.SizeBytes += int64(len(b))
	}
	if edit != nil {
		edit(&man)
	}
	raw, err := json.Marshal(man)
	if err != nil {
		t.Fatal(err)
	}
	return file(manifestEntry, raw)
}

func TestImportRefusals(t *testing.T) {
	img := []byte("the image")
	files := map[string][]byte{"checkpoint.img": img}
	dirEntry := tarEntry{hdr: tar.Header{Name: "image/", Typeflag: tar.TypeDir, Mode: 0o700}}
	man := goodManifest(t, files, nil)
	ok := []tarEntry{man, dirEntry, file("image/checkpoint.img", img)}
	link := func(typ byte, name, target string) tarEntry {
		return tarEntry{hdr: tar.Header{Name: name, Typeflag: typ, Linkname: target, Mode: 0o600}}
	}
	cases := []struct {
		name    string
		entries []tarEntry
		sha     string // "" : the stream's own
		maxB    int64
		want    func(error) bool
		says    string
	}{
		{"good", ok, "", 0, nil, ""},
		{"empty", nil, "", 0, errdefs.IsInvalidArgument, "empty"},
		{"manifest not first", []tarEntry{dirEntry, man, file("image/checkpoint.img", img)}, "", 0, errdefs.IsInvalidArgument, "first entry"},
		{"symlink", append(ok[:2:2], link(tar.TypeSymlink, "image/checkpoint.img", "/etc/passwd")), "", 0, errdefs.IsInvalidArgument, "only regular files"},
		{"hard link", append(ok[:2:2], link(tar.TypeLink, "image/checkpoint.img", "zygo-checkpoint.json")), "", 0, errdefs.IsInvalidArgument, "only regular files"},
		{"device", append(ok[:2:2], tarEntry{hdr: tar.Header{Name: "image/checkpoint.img", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}), "", 0, errdefs.IsInvalidArgument, "only regular files"},
		{"fifo", append(ok[:2:2], tarEntry{hdr: tar.Header{Name: "image/checkpoint.img", Typeflag: tar.TypeFifo}}), "", 0, errdefs.IsInvalidArgument, "only regular files"},
		{"dot dot", append(ok[:2:2], file("image/../escape", img)), "", 0, errdefs.IsInvalidArgument, "component"},
		{"absolute", append(ok[:2:2], file("/image/checkpoint.img", img)), "", 0, errdefs.IsInvalidArgument, "outside"},
		{"outside image/", append(ok[:2:2], file("other/checkpoint.img", img)), "", 0, errdefs.IsInvalidArgument, "outside"},
		{"not in the manifest", append(ok[:3:3], file("image/extra", img)), "", 0, errdefs.IsInvalidArgument, "not in the manifest"},
		{"missing file", ok[:2], "", 0, errdefs.IsInvalidArgument, "missing"},
		{"duplicate", append(ok[:3:3], file("image/checkpoint.img", img)), "", 0, errdefs.IsInvalidArgument, "twice"},
		{"bad checksum", append(ok[:2:2], file("image/checkpoint.img", []byte("the imagE"))), "", 0, errdefs.IsInvalidArgument, "checksum"},
		{"wrong sha256", ok, strings.Repeat("00", 32), 0, errdefs.IsInvalidArgument, "sha256"},
		{"malformed sha256", ok, "xyz", 0, errdefs.IsInvalidArgument, "sha256"},
		{"too large", ok, "", 1024, isTooLarge, "import bound"},
		{"manifest names secrets", []tarEntry{goodManifest(t, files, func(m *imageManifest) { m.Options.Secrets = []string{"db"} }), dirEntry, ok[2]}, "", 0, errdefs.IsInvalidArgument, "manifest.options.secrets"},
		{"manifest unknown field", []tarEntry{file(manifestEntry, []byte(`{"format":1,"evil":true}`)), dirEntry, ok[2]}, "", 0, errdefs.IsInvalidArgument, "unknown field"},
		{"manifest bad path", []tarEntry{goodManifest(t, files, func(m *imageManifest) { m.Checksums["../x"] = crcOf(img) }), dirEntry, ok[2]}, "", 0, errdefs.IsInvalidArgument, "manifest.checksums"},
		{"manifest bad name", []tarEntry{goodManifest(t, files, func(m *imageManifest) { m.Options.Name = "../x" }), dirEntry, ok[2]}, "", 0, errdefs.IsInvalidArgument, "manifest.options"},
		{"manifest rootfs in the state", []tarEntry{goodManifest(t, files, func(m *imageManifest) { m.Options.RootfsDir = "/" }), dirEntry, ok[2]}, "", 0, errdefs.IsInvalidArgument, "manifest.options.rootfs_dir"},
		{"manifest rootfs_dir", []tarEntry{goodManifest(t, files, func(m *imageManifest) { m.Options.RootfsDir = "/usr" }), dirEntry, ok[2]}, "", 0, errdefs.IsInvalidArgument, "manifest.options.rootfs_dir"},
		{"manifest rootfs_dir with a template", []tarEntry{goodManifest(t, files, func(m *imageManifest) {
			m.Options.RootfsDir, m.Options.Template = "/usr", BaseTemplate
		}), dirEntry, ok[2]}, "", 0, errdefs.IsInvalidArgument, "manifest.options.rootfs_dir"},
		{"manifest size_bytes past the bound", []tarEntry{goodManifest(t, files, func(m *imageManifest) { m.SizeBytes = 16 << 30 }), dirEntry, ok[2]}, "", 0, isTooLarge, "manifest.size_bytes"},
		{"unknown backend", []tarEntry{goodManifest(t, files, func(m *imageManifest) { m.Backend = "vm" }), dirEntry, ok[2]}, "", 0, errdefs.IsFailedPrecondition, "manifest.backend"},
		{"unknown template", []tarEntry{goodManifest(t, files, func(m *imageManifest) { m.Options.Template = "nope" }), dirEntry, ok[2]}, "", 0, errdefs.IsFailedPrecondition, "template"},
		{"size lies", []tarEntry{goodManifest(t, files, func(m *imageManifest) { m.SizeBytes = 1 }), dirEntry, ok[2]}, "", 0, errdefs.IsInvalidArgument, "size_bytes"},
		{"too deep", []tarEntry{goodManifest(t, map[string][]byte{strings.Repeat("d/", MaxImportDepth) + "f": img}, nil), dirEntry,
			file("image/"+strings.Repeat("d/", MaxImportDepth)+"f", img)}, "", 0, errdefs.IsInvalidArgument, "deep"},
	}
	many := []tarEntry{man, dirEntry}
	for i := range MaxImportEntries {
		many = append(many, tarEntry{hdr: tar.Header{Name: fmt.Sprintf("image/d%d/", i), Typeflag: tar.TypeDir, Mode: 0o700}})
	}
	cases = append(cases, struct {
		name    string
		entries []tarEntry
		sha     string
		maxB    int64
		want    func(error) bool
		says    string
	}{"too many entries", many, "", 0, isTooLarge, "entries"})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			reg := NewMemRegistry()
			dir := t.TempDir()
			m, err := NewManager(ManagerConfig{Backend: newFake(), Registry: reg, ImageDir: dir, Reseal: fakeReseal,
				MaxImportBytes: c.maxB, ProtectedDirs: []string{dir}})
			if err != nil {
				t.Fatal(err)
			}
			raw, sum := craft(t, c.entries)
			if c.sha != "" {
				sum = c.sha
			}
			cp, err := m.ImportCheckpoint(ctx, bytes.NewReader(raw), ImportOptions{SHA256: sum})
			if c.want == nil {
				if err != nil {
					t.Fatalf("good image refused: %v", err)
				}
				if _, err := m.Restore(ctx, cp.ID, RestoreOptions{}); err != nil {
					t.Fatalf("Restore of a good import: %v", err)
				}
				return
			}
			if err == nil || !c.want(err) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("ImportCheckpoint = %v; want a %s error saying %q", err, c.name, c.says)
			}
			ents, _ := os.ReadDir(dir)
			cps, _ := reg.ListCheckpoints(ctx)
			if len(ents) != 0 || len(cps) != 0 {
				t.Errorf("a refused import left %v in the image dir and %d records", ents, len(cps))
			}
		})
	}
}

func isTooLarge(err error) bool { return errors.Is(err, errdefs.ErrTooLarge) }
