package sandbox

import (
	"context"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// A tag shaped like a checkpoint (or sandbox) id is refused, naming the field: taking another
// checkpoint's id as a tag would make that tag unreachable (references resolve ids first) and
// lets a caller shadow ids; the checkpoint whose id it is stays reachable by it.
func TestCheckpointTagShapedLikeAnIDIsRefused(t *testing.T) {
	ctx := context.Background()
	m := newTestManager(t, newFake(), NewMemRegistry(), nil)
	if _, err := m.Create(ctx, CreateOptions{Name: "sb"}); err != nil {
		t.Fatal(err)
	}
	first, err := m.Checkpoint(ctx, "sb", "base")
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{first.ID, "cp-0123456789abcdef", "sb-0123456789abcdef"} {
		_, err := m.Checkpoint(ctx, "sb", tag)
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "tag") {
			t.Errorf("tag %q: %v, want an invalid-argument error naming the tag", tag, err)
		}
	}
	if got, err := m.GetCheckpoint(ctx, first.ID); err != nil || got.ID != first.ID {
		t.Errorf("GetCheckpoint(%s) = %v, %v; want that checkpoint", first.ID, got.ID, err)
	}
	if cps, _ := m.Checkpoints(ctx, "sb"); len(cps) != 1 {
		t.Errorf("refused tags left checkpoints: %d, want 1", len(cps))
	}
	// Tags that merely start like one are fine.
	if _, err := m.Checkpoint(ctx, "sb", "cp-latest"); err != nil {
		t.Errorf("tag cp-latest: %v", err)
	}
}
