package guest

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// handleWatch streams the changes under a directory (inotify, through fsnotify) as NDJSON
// FsEvents until the request ends. The answer's headers are sent once every watch is in
// place, so a change made after the host's WatchDir returned is seen. With recursive=1 the
// directories below are watched too, those made later included (at most MaxWatchDirs; a
// tree larger than that at the start is an error wrapping errTooLarge, directories made
// beyond it later are not watched).
//
// Memory is bounded by the kernel: while the host does not read, this handler does not
// read fsnotify's events, fsnotify does not read the inotify descriptor, and the kernel
// drops what overflows its queue (fs.inotify.max_queued_events): a slow reader loses events,
// never grows the agent.
func (a *Agent) handleWatch(w http.ResponseWriter, r *http.Request) {
	root, err := queryPath(r, "path")
	if err != nil {
		writeOpError(w, err)
		return
	}
	recursive := r.URL.Query().Get("recursive") == "1"
	st, err := os.Stat(root)
	if err != nil {
		writeOpError(w, err)
		return
	}
	if !st.IsDir() {
		writeOpError(w, fmt.Errorf("path %s is not a directory: %w", root, fs.ErrInvalid))
		return
	}
	wa, err := fsnotify.NewWatcher()
	if err != nil {
		writeOpError(w, fmt.Errorf("watching %s: %w", root, err))
		return
	}
	defer wa.Close()
	watched := 0
	add := func(dir string) error {
		if watched >= MaxWatchDirs {
			return fmt.Errorf("path %s: more than %d directories to watch: %w", root, MaxWatchDirs, errTooLarge)
		}
		if err := wa.Add(dir); err != nil {
			return fmt.Errorf("watching %s: %w", dir, err)
		}
		watched++
		return nil
	}
	addTree := func(dir string) error {
		return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p == dir {
					return err
				}
				return nil // gone meanwhile
			}
			if !d.IsDir() {
				return nil
			}
			return add(p)
		})
	}
	if recursive {
		err = addTree(root)
	} else {
		err = add(root)
	}
	if err != nil {
		writeOpError(w, err)
		return
	}
	nw := newNDJSONWriter(w)
	for {
		select {
		case <-r.Context().Done():
			return
		case <-wa.Errors:
			// An overflow of the kernel's queue: events were lost. Nothing to tell the host in
			// FsEvent's terms; the stream goes on.
		case ev, ok := <-wa.Events:
			if !ok {
				return
			}
			if recursive && ev.Has(fsnotify.Create) {
				if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
					if err := addTree(ev.Name); err != nil && !errors.Is(err, errTooLarge) {
						a.log.Debug("watching a new directory", "path", ev.Name, "err", err)
					}
				}
			}
			rel, err := filepath.Rel(root, ev.Name)
			if err != nil {
				rel = ev.Name
			}
			for _, op := range fsOps {
				if ev.Has(op.op) {
					if nw.send(FsEvent{Name: rel, Op: op.name}) != nil {
						return
					}
				}
			}
		}
	}
}

// fsOps names fsnotify's operations as FsEvent.Op does. A rename shows as "rename" of the old
// name and "create" of the new one.
var fsOps = []struct {
	op   fsnotify.Op
	name string
}{
	{fsnotify.Create, "create"}, {fsnotify.Write, "write"}, {fsnotify.Remove, "remove"},
	{fsnotify.Rename, "rename"}, {fsnotify.Chmod, "chmod"},
}
