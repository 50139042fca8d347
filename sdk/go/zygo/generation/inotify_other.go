//go:build !linux

package generation

import "context"

// watchDir returns nil: without inotify the Watcher polls.
func watchDir(context.Context, string) <-chan struct{} { return nil }
