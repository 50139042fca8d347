package gvisor

import (
	"context"
	"os"
	"path/filepath"

	"github.com/zygo-run/zygo/internal/sandbox"
)

// KillContainerForTest kills and deletes id's container behind the backend's back, as an
// engine crash would.
func KillContainerForTest(b *Backend, id string) error {
	return b.deleteContainer(context.Background(), id)
}

// RunscForTest runs a raw runsc command with the backend's global flags.
func RunscForTest(b *Backend, ctx context.Context, args ...string) ([]byte, error) {
	return b.runsc(ctx, args...)
}

// RawRestoreForTest restores imageDir as container id from a bundle in dir made exactly as
// the backend makes them, with plain runsc and no guest channel. limits must be those of the
// image's sandbox (runsc refuses a restore whose rlimits differ from the image's).
func RawRestoreForTest(b *Backend, ctx context.Context, dir, id, imageDir string, limits sandbox.Limits) error {
	host := filepath.Join(dir, "host")
	if err := os.MkdirAll(host, 0o700); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), b.bundleSpec(sandbox.Spec{ID: id, Hostname: id, Limits: limits}, host), 0o600); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, "runsc.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	return b.runscDetached(ctx, logf, "restore", "--detach", "--image-path="+imageDir, "--bundle="+dir, id)
}

// StopListeningForTest closes id's host listener, so its guest can never dial back (as a
// guest that does not come back after a checkpoint).
func StopListeningForTest(b *Backend, id string) error {
	b.mu.Lock()
	in := b.insts[id]
	b.mu.Unlock()
	if in == nil {
		return os.ErrNotExist
	}
	in.stop()
	return nil
}
