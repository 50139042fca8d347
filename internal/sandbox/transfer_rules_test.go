package sandbox

// Tests of the rules an imported checkpoint is held to (transfer.go's doc): no host path of
// any daemon, no place among a local sandbox's checkpoints, a bound on the disk it takes; and
// of the bounds a caller of one sandbox meets (published ports, an export's lease).

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
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// TestImportBelongsToNoLocalSandbox: a manifest that names a local sandbox's id and one of its
// tags does not put the import among that sandbox's checkpoints: the sandbox's rollback by
// the tag finds its own, a rollback to the import by id is refused as outside its lineage, the
// sandbox's listing leaves it out, and a copy restored from it has no local parent.
func TestImportBelongsToNoLocalSandbox(t *testing.T) {
	ctx := context.Background()
	reg := NewMemRegistry()
	m := newTestManager(t, newFake(), reg, nil)
	victim, err := m.Create(ctx, CreateOptions{Name: "victim"})
	if err != nil {
		t.Fatal(err)
	}
	good, err := m.Checkpoint(ctx, victim.ID, "good")
	if err != nil {
		t.Fatal(err)
	}
	img := []byte("the author's image")
	files := map[string][]byte{"checkpoint.img": img}
	raw, sum := craft(t, []tarEntry{goodManifest(t, files, func(man *imageManifest) {
		man.SandboxID, man.Tag, man.Options.Name = victim.ID, "good", "victim"
	}), {hdr: dirHeader("image/")}, file("image/checkpoint.img", img)})
	imp, err := m.ImportCheckpoint(ctx, bytes.NewReader(raw), ImportOptions{SHA256: sum})
	if err != nil {
		t.Fatal(err)
	}
	if imp.SandboxID == victim.ID || imp.Origin == nil || imp.Origin.SandboxID != victim.ID {
		t.Fatalf("imported %+v (origin %+v): its sandbox_id must not be the manifest's, which is kept as its origin", imp, imp.Origin)
	}
	own, err := m.Checkpoints(ctx, "victim")
	if err != nil || len(own) != 1 || own[0].ID != good.ID {
		t.Errorf("the victim's checkpoints = %+v, %v; want only its own %s", own, err, good.ID)
	}
	rb, err := m.Rollback(ctx, "victim", "good")
	if err != nil || rb.CheckpointID != good.ID {
		t.Errorf("rollback of the victim to its tag = %+v, %v; want its own checkpoint %s", rb.CheckpointID, err, good.ID)
	}
	if _, err := m.Rollback(ctx, "victim", imp.ID); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "not sandbox") {
		t.Errorf("rollback of the victim to the import = %v, want refused as outside its lineage", err)
	}
	if _, err := m.Fork(ctx, "victim", ForkOptions{N: 1, From: imp.ID}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("fork of the victim from the import = %v, want refused as outside its lineage", err)
	}
	kid, err := m.Restore(ctx, imp.ID, RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if kid.ParentID == victim.ID || kid.ParentID != imp.SandboxID {
		t.Errorf("a copy of the import has parent %s; want the import's own sandbox id %s, never the victim's", kid.ParentID, imp.SandboxID)
	}
	// The copy's own lineage is the import's: its rollback to it works.
	if _, err := m.Rollback(ctx, kid.ID, imp.ID); err != nil {
		t.Errorf("rollback of the import's copy to it: %v", err)
	}
}

func dirHeader(name string) tar.Header {
	return tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o700}
}

// rootDir returns a new directory with one file, a root Create takes.
func rootDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	if err := os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestImportRootIsResolvedHere: an imported image's root is this daemon's template of its
// name, and every restore checks it again: once the template's directory is another (the
// daemon restarted with the template elsewhere), a restore of the import is refused rather
// than run on a directory no template names.
func TestImportRootIsResolvedHere(t *testing.T) {
	ctx := context.Background()
	reg := NewMemRegistry()
	dirA, dirB := rootDir(t), rootDir(t)
	imgDir := t.TempDir()
	mk := func(tmplDir string) *Manager {
		m, err := NewManager(ManagerConfig{Backend: newFake(), Registry: reg, ImageDir: imgDir, Reseal: fakeReseal,
			Templates: []Template{{Name: "tpl", RootfsDir: tmplDir}}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := mk(dirA)
	img := []byte("image")
	raw, sum := craft(t, []tarEntry{goodManifest(t, map[string][]byte{"checkpoint.img": img}, func(man *imageManifest) {
		man.Options.Template = "tpl"
	}), {hdr: dirHeader("image/")}, file("image/checkpoint.img", img)})
	imp, err := m.ImportCheckpoint(ctx, bytes.NewReader(raw), ImportOptions{SHA256: sum})
	if err != nil {
		t.Fatal(err)
	}
	if imp.Options.RootfsDir != dirA {
		t.Fatalf("imported root %q, want the template's here %q", imp.Options.RootfsDir, dirA)
	}
	if _, err := m.Restore(ctx, imp.ID, RestoreOptions{}); err != nil {
		t.Fatalf("restore with the template in place: %v", err)
	}
	m2 := mk(dirB)
	if _, err := m2.Restore(ctx, imp.ID, RestoreOptions{}); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "template") {
		t.Errorf("restore of the import after its template moved = %v, want refused naming the template", err)
	}
}

// TestRestoreRechecksRoot: a checkpoint's root is checked again at every restore, fork and
// rollback, as create checks it: a rootfs_dir replaced since by a symlink into the daemon's
// state directory is refused, and nothing is restored or attached.
func TestRestoreRechecksRoot(t *testing.T) {
	ctx := context.Background()
	state := t.TempDir()
	imgDir := filepath.Join(state, "images")
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	be := newFake()
	nets := &fakeNet{open: map[string]NetIdentity{}, detached: map[string]NetIdentity{}}
	m, err := NewManager(ManagerConfig{Backend: be, Registry: NewMemRegistry(), ImageDir: imgDir, Reseal: fakeReseal,
		ProtectedDirs: []string{state}, Network: nets})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := m.Create(ctx, CreateOptions{Name: "s", RootfsDir: root})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := m.Checkpoint(ctx, sb.ID, "t")
	if err != nil {
		t.Fatal(err)
	}
	// The directory becomes a symlink to the daemon's state.
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(state, root); err != nil {
		t.Fatal(err)
	}
	var restores atomic.Int32
	be.failRestore = func(Spec) error { restores.Add(1); return nil }
	if _, err := m.Restore(ctx, cp.ID, RestoreOptions{}); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "state directory") {
		t.Errorf("restore = %v, want refused: the root overlaps the state directory", err)
	}
	if _, err := m.Rollback(ctx, sb.ID, "t"); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "state directory") {
		t.Errorf("rollback = %v, want refused: the root overlaps the state directory", err)
	}
	if res, err := m.Fork(ctx, sb.ID, ForkOptions{N: 1, From: "t"}); err == nil || !strings.Contains(err.Error(), "state directory") {
		t.Errorf("fork = %+v, %v, want refused: the root overlaps the state directory", res, err)
	}
	if n := restores.Load(); n != 0 {
		t.Errorf("the engine restored %d times, want none", n)
	}
	nets.mu.Lock()
	defer nets.mu.Unlock()
	if len(nets.open) != 1 {
		t.Errorf("network endpoints open: %v, want the sandbox's own only (a refused copy makes none)", nets.open)
	}
}

// TestExportRefusesHostRoot: a checkpoint whose root is a rootfs_dir (a host path, no
// template) is not exported, since no importer takes a host path.
func TestExportRefusesHostRoot(t *testing.T) {
	ctx := context.Background()
	m := newTestManager(t, newFake(), NewMemRegistry(), nil)
	sb, err := m.Create(ctx, CreateOptions{RootfsDir: rootDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := m.Checkpoint(ctx, sb.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ExportCheckpoint(ctx, cp.ID); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "template") {
		t.Errorf("export = %v, want refused saying to use a template", err)
	}
}

// TestImportRefusesSparse: a tar of a few KiB holding a sparse file (GNU tar --sparse, PAX
// and GNU formats) is refused before its holes are written: by the manifest's size_bytes
// against the bound when it is past it, and as a sparse entry otherwise. Nothing is left.
func TestImportRefusesSparse(t *testing.T) {
	tarBin, err := exec.LookPath("tar")
	if err != nil {
		t.Fatal("this test needs GNU tar (apt-get install tar)")
	}
	const size = 64 << 20 // of zeros, nearly all hole
	crc := crc32.New(castagnoli)
	if _, err := io.CopyN(crc, zeros{}, size); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"pax", "gnu"} {
		for _, bound := range []int64{1 << 20, 1 << 30} {
			t.Run(fmt.Sprintf("%s/bound %d MiB", format, bound>>20), func(t *testing.T) {
				ctx := context.Background()
				w := t.TempDir()
				if err := os.Mkdir(filepath.Join(w, "image"), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(w, "image/checkpoint.img"), nil, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(filepath.Join(w, "image/checkpoint.img"), size); err != nil {
					t.Fatal(err)
				}
				man, _ := json.Marshal(imageManifest{Format: ImageFormat, ID: "cp-0123456789abcdef", SandboxID: "sb-0123456789abcdef",
					Backend: "fake", Token: strings.Repeat("ab", 32), Generation: strings.Repeat("cd", 16), SizeBytes: size,
					Checksums: map[string]string{"checkpoint.img": sumOf(crc)}})
				if err := os.WriteFile(filepath.Join(w, manifestEntry), man, 0o600); err != nil {
					t.Fatal(err)
				}
				out := filepath.Join(t.TempDir(), "sparse.tar")
				cmd := exec.Command(tarBin, "--format="+format, "--sparse", "-cf", out, manifestEntry, "image/")
				cmd.Dir = w
				if b, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("GNU tar: %v: %s", err, b)
				}
				raw, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				if len(raw) > 1<<20 {
					t.Fatalf("the tar is %d bytes: GNU tar wrote no sparse entry", len(raw))
				}
				sum := sha256.Sum256(raw)
				dir := t.TempDir()
				reg := NewMemRegistry()
				m, err := NewManager(ManagerConfig{Backend: newFake(), Registry: reg, ImageDir: dir, Reseal: fakeReseal, MaxImportBytes: bound})
				if err != nil {
					t.Fatal(err)
				}
				_, err = m.ImportCheckpoint(ctx, bytes.NewReader(raw), ImportOptions{SHA256: hex.EncodeToString(sum[:])})
				switch {
				case bound < size && (!errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "size_bytes")):
					t.Errorf("import of %d MiB of holes under a %d MiB bound = %v, want too large naming size_bytes", size>>20, bound>>20, err)
				case bound > size && (!errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "sparse")):
					t.Errorf("import of a sparse entry = %v, want refused as sparse", err)
				}
				ents, _ := os.ReadDir(dir)
				cps, _ := reg.ListCheckpoints(ctx)
				if len(ents) != 0 || len(cps) != 0 {
					t.Errorf("a refused import left %v in the image dir and %d records", ents, len(cps))
				}
			})
		}
	}
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestPortCap: a sandbox publishes at most MaxPorts ports; one more is refused naming the
// bound, asking again for a published one still answers, closing one (Unpublish) frees its
// place, and another sandbox has its own.
func TestPortCap(t *testing.T) {
	ctx := context.Background()
	nets := &fakeNet{open: map[string]NetIdentity{}, detached: map[string]NetIdentity{}}
	m, err := NewManager(ManagerConfig{Backend: newFake(), Registry: NewMemRegistry(), ImageDir: t.TempDir(), Reseal: fakeReseal,
		Network: nets})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	a, err := m.Create(ctx, CreateOptions{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Create(ctx, CreateOptions{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	for p := 1; p <= MaxPorts; p++ {
		if _, err := m.Port(ctx, a.ID, p); err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
	}
	_, err = m.Port(ctx, a.ID, MaxPorts+1)
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), fmt.Sprint(MaxPorts)) || !strings.Contains(err.Error(), "DELETE") {
		t.Errorf("port %d = %v, want refused naming the bound %d and how ports are freed", MaxPorts+1, err, MaxPorts)
	}
	if _, err := m.Port(ctx, a.ID, 1); err != nil {
		t.Errorf("a published port again: %v", err)
	}
	if err := m.Unpublish(ctx, a.ID, 1); err != nil {
		t.Fatalf("Unpublish: %v", err)
	}
	if err := m.Unpublish(ctx, a.ID, 1); !errdefs.IsNotFound(err) {
		t.Errorf("Unpublish of a port no longer published = %v, want not found", err)
	}
	if _, err := m.Port(ctx, a.ID, MaxPorts+1); err != nil {
		t.Errorf("a port once one was closed: %v", err)
	}
	if _, err := m.Port(ctx, b.ID, MaxPorts+1); err != nil {
		t.Errorf("another sandbox's port: %v", err)
	}
	if err := m.Remove(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	m.portMu.Lock()
	n := len(m.ports)
	m.portMu.Unlock()
	if n != 1 {
		t.Errorf("%d listeners after a's removal, want b's one", n)
	}
}

// TestRemoveDuringExport: a checkpoint being exported is not removed, and the refusal says an
// export holds it (and how it ends), not a fork or rollback.
func TestRemoveDuringExport(t *testing.T) {
	ctx := context.Background()
	m := newTestManager(t, newFake(), NewMemRegistry(), nil)
	sb, err := m.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := m.Checkpoint(ctx, sb.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	e, err := m.ExportCheckpoint(ctx, cp.ID)
	if err != nil {
		t.Fatal(err)
	}
	err = m.RemoveCheckpoint(ctx, cp.ID)
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "1 export") || strings.Contains(err.Error(), "fork") {
		t.Errorf("rm during an export = %v, want refused naming the export", err)
	}
	e.Close()
	if err := m.RemoveCheckpoint(ctx, cp.ID); err != nil {
		t.Errorf("rm once the export ended: %v", err)
	}
}
