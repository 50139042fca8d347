package e2esandbox

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/sdk/go/zygo"
)

var exportedRE = regexp.MustCompile(`exported (cp-[0-9a-f]{16}): .*, sha256 ([0-9a-f]{64})`)

// TestCheckpointMovesBetweenDaemons exports a checkpoint from one daemon and imports it into
// another (two `zygo serve` on separate state dirs, real runsc), once streamed through the SDK
// (as the Kubernetes controller does) and once through a file with the CLI. Copies restored
// on the second daemon have the source's files and process state, and each its own
// generation; an altered stream is refused and leaves no checkpoint.
func TestCheckpointMovesBetweenDaemons(t *testing.T) {
	ctx := context.Background()
	a, b := startDaemon(t), startDaemon(t)
	src := a.OK("sandbox", "create", "--name", "mover")
	a.OK("sandbox", "exec", src, "--", "sh", "-c", "echo carried > /tmp/moved")
	a.OK("sandbox", "run-code", src, "--code", "x = 41")
	srcGen := a.OK("sandbox", "generation", src)
	cp := a.OK("sandbox", "checkpoint", src, "--tag", "moving")

	// Streamed: source daemon → target daemon, never whole in memory.
	img, err := a.Client.ExportCheckpoint(ctx, "moving")
	if err != nil {
		t.Fatalf("ExportCheckpoint: %v", err)
	}
	if img.Checkpoint != cp || img.Size <= 0 || len(img.SHA256) != 64 {
		t.Fatalf("export of %s announced %+v", cp, img)
	}
	imp, err := b.Client.ImportCheckpoint(ctx, img.Body, img.Size, img.SHA256, "")
	img.Body.Close()
	if err != nil {
		t.Fatalf("ImportCheckpoint: %v\ntarget log:\n%s", err, tail(b.Log(), 30))
	}
	if imp.ID == cp || imp.Tag != "moving" || imp.SizeBytes <= 0 {
		t.Errorf("imported checkpoint %+v", imp)
	}
	t.Logf("moved %s (%d bytes of tar) to %s", cp, img.Size, imp.ID)

	gens := map[string]bool{srcGen: true}
	for range 2 {
		kid := b.OK("sandbox", "restore", imp.ID)
		if got := b.OK("sandbox", "exec", kid, "--", "cat", "/tmp/moved"); got != "carried" {
			t.Errorf("copy %s: /tmp/moved = %q, want the source's", kid, got)
		}
		if got := b.OK("sandbox", "run-code", kid, "--code", "x + 1"); got != "42" {
			t.Errorf("copy %s: x + 1 = %q, want 42 (the source's interpreter state)", kid, got)
		}
		gen := b.OK("sandbox", "generation", kid)
		if gens[gen] {
			t.Errorf("copy %s has generation %s, which another copy or the source has", kid, gen)
		}
		gens[gen] = true
	}

	// Through a file with the CLI; a wrong digest is refused and leaves nothing.
	tarOut, errOut, code := a.CLI("sandbox", "checkpoints", "export", cp)
	m := exportedRE.FindStringSubmatch(errOut)
	if code != 0 || m == nil || m[1] != cp {
		t.Fatalf("checkpoints export: exit %d, stderr %q", code, errOut)
	}
	file := filepath.Join(t.TempDir(), "image.tar")
	if err := os.WriteFile(file, []byte(tarOut), 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := b.Client.Checkpoints(ctx, "")
	wrong := strings.Repeat("0", 64)
	if msg := b.Fails("sandbox", "checkpoints", "import", file, "--sha256", wrong); !strings.Contains(msg, "sha256") {
		t.Errorf("import with a wrong digest: %q, want it to name sha256", msg)
	}
	if after, _ := b.Client.Checkpoints(ctx, ""); len(after) != len(before) {
		t.Errorf("a refused import left a checkpoint: %d before, %d after", len(before), len(after))
	}
	if ents := dirEntries(t, filepath.Join(b.StateDir, "images")); len(ents) != len(before) {
		t.Errorf("a refused import left files in the image dir: %v", ents)
	}
	id2 := b.OK("sandbox", "checkpoints", "import", file, "--sha256", m[2], "--tag", "second")
	kid := b.OK("sandbox", "restore", id2)
	if got := b.OK("sandbox", "run-code", kid, "--code", "x"); got != "41" {
		t.Errorf("copy of the file import: x = %q", got)
	}
	if _, err := b.Client.ExportCheckpoint(ctx, "nope"); !zygo.IsNotFound(err) {
		t.Errorf("export of an unknown checkpoint = %v, want 404", err)
	}

	// The image of a sandbox holding a secret holds its value: it never leaves its host.
	if _, errOut, code := a.CLIIn("v4lue\n", "secret", "set", "API_KEY"); code != 0 {
		t.Fatalf("secret set: %s", errOut)
	}
	sec := a.OK("sandbox", "create", "--secret", "API_KEY")
	secCP := a.OK("sandbox", "checkpoint", sec)
	if _, err := a.Client.ExportCheckpoint(ctx, secCP); !zygo.IsConflict(err) || !strings.Contains(err.Error(), "secrets") {
		t.Errorf("export of a checkpoint of a sandbox with a secret = %v, want 409 naming secrets", err)
	}
	if msg := a.Fails("sandbox", "checkpoints", "export", secCP); !strings.Contains(msg, "secrets") {
		t.Errorf("checkpoints export of it: %q", msg)
	}
}
