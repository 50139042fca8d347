package e2esandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// rewriteImage returns the export tar raw with its manifest edited by edit (as a JSON object)
// and the image files in drop left out (and out of the manifest's checksums and size), and
// the new stream's SHA-256: what an image's author can send.
func rewriteImage(t *testing.T, raw []byte, edit func(map[string]any), drop ...string) ([]byte, string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(raw))
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	var man map[string]any
	type ent struct {
		h    *tar.Header
		body []byte
	}
	var rest []ent
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		if h.Name == "zygo-checkpoint.json" {
			if err := json.Unmarshal(body, &man); err != nil {
				t.Fatal(err)
			}
			continue
		}
		rest = append(rest, ent{h, body})
	}
	sums := man["checksums"].(map[string]any)
	size := man["size_bytes"].(float64)
	kept := rest[:0]
	for _, e := range rest {
		name := strings.TrimPrefix(e.h.Name, "image/")
		dropped := false
		for _, d := range drop {
			if name == d {
				dropped = true
				delete(sums, d)
				size -= float64(len(e.body))
			}
		}
		if !dropped {
			kept = append(kept, e)
		}
	}
	man["size_bytes"] = size
	edit(man)
	mb, _ := json.Marshal(man)
	for _, e := range append([]ent{{&tar.Header{Name: "zygo-checkpoint.json", Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(mb)), Format: tar.FormatPAX}, mb}}, kept...) {
		if err := tw.WriteHeader(e.h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(out.Bytes())
	return out.Bytes(), hex.EncodeToString(sum[:])
}

// TestImportedImageCannotChooseItsPlace: on two real daemons, an image rewritten by its
// author (attack-d's import_hostroot) can name no host directory of the importer as its root,
// must keep its bundle, and cannot plant itself among a local sandbox's checkpoints: that
// sandbox's rollback to its own tag restores its own checkpoint.
func TestImportedImageCannotChooseItsPlace(t *testing.T) {
	ctx := context.Background()
	a, b := startDaemon(t), startDaemon(t)
	src := a.OK("sandbox", "create", "--name", "author")
	a.OK("sandbox", "exec", src, "--", "sh", "-c", "echo author > /tmp/who")
	cp := a.OK("sandbox", "checkpoint", src, "--tag", "good")
	img, err := a.Client.ExportCheckpoint(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(img.Body)
	img.Body.Close()
	if err != nil {
		t.Fatal(err)
	}

	victim := b.OK("sandbox", "create", "--name", "victim")
	b.OK("sandbox", "exec", victim, "--", "sh", "-c", "echo victim > /tmp/who")
	own := b.OK("sandbox", "checkpoint", victim, "--tag", "good")
	before, _ := b.Client.Checkpoints(ctx, "")

	hostDir, sum := rewriteImage(t, raw, func(m map[string]any) { m["options"].(map[string]any)["rootfs_dir"] = "/usr" })
	if _, err := b.Client.ImportCheckpoint(ctx, bytes.NewReader(hostDir), int64(len(hostDir)), sum, ""); !zygo.IsBadRequest(err) ||
		!strings.Contains(err.Error(), "manifest.options.rootfs_dir") {
		t.Errorf("import naming rootfs_dir /usr = %v, want 400 naming manifest.options.rootfs_dir", err)
	}
	noBundle, sum := rewriteImage(t, raw, func(map[string]any) {}, "zygo-bundle.json")
	if _, err := b.Client.ImportCheckpoint(ctx, bytes.NewReader(noBundle), int64(len(noBundle)), sum, ""); !zygo.IsBadRequest(err) ||
		!strings.Contains(err.Error(), "bundle") {
		t.Errorf("import without the image's bundle = %v, want 400 naming the bundle", err)
	}
	if after, _ := b.Client.Checkpoints(ctx, ""); len(after) != len(before) {
		t.Errorf("refused imports left checkpoints: %d before, %d after", len(before), len(after))
	}

	vid := b.Record("victim").ID
	claim, sum := rewriteImage(t, raw, func(m map[string]any) { m["sandbox_id"], m["tag"] = vid, "good" })
	imp, err := b.Client.ImportCheckpoint(ctx, bytes.NewReader(claim), int64(len(claim)), sum, "")
	if err != nil {
		t.Fatalf("import claiming the victim's id and tag: %v", err)
	}
	if imp.SandboxID == vid || imp.Origin == nil || imp.Origin.SandboxID != vid {
		t.Errorf("import %+v (origin %+v): want a sandbox id of its own, the victim's only as its origin", imp, imp.Origin)
	}
	b.OK("sandbox", "rollback", victim, "--to", "good")
	if got := b.Record(victim).CheckpointID; got != own {
		t.Errorf("the victim rolled back to %s, want its own checkpoint %s", got, own)
	}
	if got := b.OK("sandbox", "exec", victim, "--", "cat", "/tmp/who"); got != "victim" {
		t.Errorf("after its rollback the victim holds %q, want its own state", got)
	}
	// The import restores as itself, on this daemon's default root.
	kid := b.OK("sandbox", "restore", imp.ID)
	if got := b.OK("sandbox", "exec", kid, "--", "cat", "/tmp/who"); got != "author" {
		t.Errorf("a copy of the import holds %q, want the author's", got)
	}
	if p := b.Record(kid).ParentID; p == vid {
		t.Errorf("a copy of the import has the victim as its parent")
	}
}
