package function

import (
	"context"

	"github.com/zygo-run/zygo/internal/agentproc"
)

// Step is one stage of a deploy or a rollback, in the order they happen.
type Step string

const (
	// StepUploading: the bundle is being received and checked (Deploy only).
	StepUploading Step = "uploading"
	// StepUnpacking: the version's files are being stored (Deploy only).
	StepUnpacking Step = "unpacking"
	// StepImporting: the new version's sandbox is starting and importing
	// the code (bounded by limits.import_timeout_ms).
	StepImporting Step = "importing"
	// StepWarmup: the import is done; the warm-up checks' findings are in
	// Progress.Checks. Traffic has not moved yet.
	StepWarmup Step = "warmup"
	// StepReady: traffic has moved to the new version; the old one drains.
	StepReady Step = "ready"
)

// Progress is one report of a deploy or rollback in progress.
type Progress struct {
	Step    Step
	Version string            // the version being deployed; "" before it is known (uploading)
	Checks  []agentproc.Check // StepWarmup: the warm-up checks' findings
}

type progressKey struct{}

// WithProgress returns a context under which Deploy and Rollback call fn
// with each step they reach, on the deploying goroutine, in order. fn must
// not block for long (it delays the deploy) and must not call the Manager.
func WithProgress(ctx context.Context, fn func(Progress)) context.Context {
	return context.WithValue(ctx, progressKey{}, fn)
}

// ReportProgress calls ctx's progress function (WithProgress), if any, with p.
func ReportProgress(ctx context.Context, p Progress) {
	if fn, ok := ctx.Value(progressKey{}).(func(Progress)); ok && fn != nil {
		fn(p)
	}
}
