//go:build linux

package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/store"
)

// TestRestoreWarnsOfCheckpointsElsewhere: zygo restore of a backup with checkpoint images
// into another state dir path warns that their records name the old one.
func TestRestoreWarnsOfCheckpointsElsewhere(t *testing.T) {
	state := t.TempDir()
	st, err := store.Open(context.Background(), filepath.Join(state, "zygo.db"))
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	os.MkdirAll(filepath.Join(state, "images", "cp-1"), 0o700)
	os.WriteFile(filepath.Join(state, "images", "cp-1", "pages.img"), []byte("x"), 0o600)
	dir := filepath.Join(t.TempDir(), "b")
	if code, out, stderr := runCLI(t, "--state-dir", state, "backup", "--checkpoints", dir); code != 0 || !strings.Contains(out, "checkpoint images") {
		t.Fatalf("backup: exit %d %q %q", code, out, stderr)
	}
	other := filepath.Join(t.TempDir(), "state")
	code, out, stderr := runCLI(t, "--state-dir", other, "restore", dir)
	if code != 0 || !strings.Contains(out, "restored the backup of "+state) ||
		!strings.Contains(stderr, "zygo: warning: the checkpoint images were backed up from "+state) {
		t.Errorf("restore elsewhere: exit %d, stdout %q, stderr %q; want it restored with a warning", code, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(other, "images", "cp-1", "pages.img")); err != nil {
		t.Errorf("the image was not restored: %v", err)
	}
}
