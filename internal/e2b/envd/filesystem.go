package envd

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/zygo-run/zygo/internal/e2b/envd/spec/filesystem"
	"github.com/zygo-run/zygo/internal/e2b/envd/spec/filesystem/filesystemconnect"
	"github.com/zygo-run/zygo/internal/errdefs"
)

// maxListDepth bounds ListDir's depth.
const maxListDepth = 64

// filesystemService is filesystem.Filesystem over the Server's Sandboxes. Relative paths
// are relative to the home of the request's user (its Authorization header).
type filesystemService struct{ s *Server }

var _ filesystemconnect.FilesystemHandler = (*filesystemService)(nil)

// call is what every filesystem RPC starts with: the sandbox id and the request's user.
func (f *filesystemService) call(ctx context.Context, req connect.AnyRequest) (id, user string, err error) {
	if id, err = sandboxIDFrom(ctx); err != nil {
		return "", "", f.s.rpcError(ctx, "", err)
	}
	if user, err = userFromHeader(req.Header()); err != nil {
		return "", "", f.s.rpcError(ctx, "", err)
	}
	return id, user, nil
}

// Stat describes one entry, without following a final symlink.
func (f *filesystemService) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	id, user, err := f.call(ctx, req)
	if err != nil {
		return nil, err
	}
	p, err := f.s.resolvePath(ctx, id, "path", req.Msg.GetPath(), user)
	if err != nil {
		return nil, f.s.rpcError(ctx, id, err)
	}
	e, err := f.s.sb.Stat(ctx, id, p)
	if err != nil {
		return nil, f.s.rpcError(ctx, id, fmt.Errorf("stat %s: %w", p, err))
	}
	return connect.NewResponse(&pb.StatResponse{Entry: entryInfo(e)}), nil
}

// MakeDir creates a directory and its missing parents, owned by the request's user;
// already_exists when the path exists (the SDK's makeDir then answers false).
func (f *filesystemService) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	id, user, err := f.call(ctx, req)
	if err != nil {
		return nil, err
	}
	p, err := f.s.resolvePath(ctx, id, "path", req.Msg.GetPath(), user)
	if err != nil {
		return nil, f.s.rpcError(ctx, id, err)
	}
	e, err := f.s.sb.MakeDir(ctx, id, p, user)
	if err != nil {
		return nil, f.s.rpcError(ctx, id, fmt.Errorf("directory %s: %w", p, err))
	}
	return connect.NewResponse(&pb.MakeDirResponse{Entry: entryInfo(e)}), nil
}

// Move renames source to destination.
func (f *filesystemService) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	id, user, err := f.call(ctx, req)
	if err != nil {
		return nil, err
	}
	src, err := f.s.resolvePath(ctx, id, "source", req.Msg.GetSource(), user)
	if err != nil {
		return nil, f.s.rpcError(ctx, id, err)
	}
	dst, err := f.s.resolvePath(ctx, id, "destination", req.Msg.GetDestination(), user)
	if err != nil {
		return nil, f.s.rpcError(ctx, id, err)
	}
	e, err := f.s.sb.Move(ctx, id, src, dst)
	if err != nil {
		return nil, f.s.rpcError(ctx, id, fmt.Errorf("moving %s to %s: %w", src, dst, err))
	}
	return connect.NewResponse(&pb.MoveResponse{Entry: entryInfo(e)}), nil
}

// ListDir lists a directory, depth levels deep (0 means 1, as in E2B's envd).
func (f *filesystemService) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	id, user, err := f.call(ctx, req)
	if err != nil {
		return nil, err
	}
	p, err := f.s.resolvePath(ctx, id, "path", req.Msg.GetPath(), user)
	if err != nil {
		return nil, f.s.rpcError(ctx, id, err)
	}
	depth := max(int(req.Msg.GetDepth()), 1)
	if depth > maxListDepth {
		return nil, f.s.rpcError(ctx, "", invalidf("depth %d: at most %d", depth, maxListDepth))
	}
	entries, err := f.s.sb.ListDir(ctx, id, p, depth)
	if err != nil {
		return nil, f.s.rpcError(ctx, id, fmt.Errorf("listing %s: %w", p, err))
	}
	out := &pb.ListDirResponse{Entries: make([]*pb.EntryInfo, 0, len(entries))}
	for _, e := range entries {
		out.Entries = append(out.Entries, entryInfo(e))
	}
	return connect.NewResponse(out), nil
}

// Remove removes a file, or a directory recursively.
func (f *filesystemService) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	id, user, err := f.call(ctx, req)
	if err != nil {
		return nil, err
	}
	p, err := f.s.resolvePath(ctx, id, "path", req.Msg.GetPath(), user)
	if err != nil {
		return nil, f.s.rpcError(ctx, id, err)
	}
	if p == "/" {
		return nil, f.s.rpcError(ctx, "", invalidf("path /: the root of the sandbox cannot be removed"))
	}
	if err := f.s.sb.RemovePath(ctx, id, p); err != nil {
		return nil, f.s.rpcError(ctx, id, fmt.Errorf("removing %s: %w", p, err))
	}
	return connect.NewResponse(&pb.RemoveResponse{}), nil
}

// WatchDir streams the changes under a directory: a start event once the watch is set,
// then one event per change, and keepalives when the Keepalive-Ping-Interval header asks.
// It ends with the call (the SDK's stop or timeout).
func (f *filesystemService) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	id, user, err := f.call(ctx, req)
	if err != nil {
		return err
	}
	p, err := f.s.resolvePath(ctx, id, "path", req.Msg.GetPath(), user)
	if err != nil {
		return f.s.rpcError(ctx, id, err)
	}
	every, err := keepaliveInterval(req.Header())
	if err != nil {
		return f.s.rpcError(ctx, "", err)
	}
	release, err := f.s.streams.acquire(id, watchStream)
	if err != nil {
		return f.s.rpcError(ctx, id, fmt.Errorf("watching %s: %w", p, err))
	}
	defer release()
	events, err := f.s.sb.WatchDir(ctx, id, p, req.Msg.GetRecursive())
	if err != nil {
		return f.s.rpcError(ctx, id, fmt.Errorf("watching %s: %w", p, f.s.streams.explain(id, err)))
	}
	if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				if err := ctx.Err(); err != nil {
					return f.s.rpcError(ctx, id, err)
				}
				return f.s.rpcError(ctx, id, fmt.Errorf("the watch of %s ended (removed, or the sandbox stopped): %w", p, errdefs.ErrUnavailable))
			}
			fe := f.s.fsEvent(ctx, id, p, ev, req.Msg.GetIncludeEntry())
			if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: fe}}); err != nil {
				return err
			}
		case <-tick:
			if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Keepalive{Keepalive: &pb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return f.s.rpcError(ctx, id, ctx.Err())
		}
	}
}

// CreateWatcher starts a polling watch of a directory; GetWatcherEvents collects its events.
func (f *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	id, user, err := f.call(ctx, req)
	if err != nil {
		return nil, err
	}
	p, err := f.s.resolvePath(ctx, id, "path", req.Msg.GetPath(), user)
	if err != nil {
		return nil, f.s.rpcError(ctx, id, err)
	}
	wid, err := f.s.watchers.create(f.s, id, p, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		return nil, f.s.rpcError(ctx, id, fmt.Errorf("watching %s: %w", p, err))
	}
	return connect.NewResponse(&pb.CreateWatcherResponse{WatcherId: wid}), nil
}

// GetWatcherEvents returns, and forgets, the events a watcher saw since the last call.
func (f *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	id, _, err := f.call(ctx, req)
	if err != nil {
		return nil, err
	}
	events, err := f.s.watchers.take(id, req.Msg.GetWatcherId())
	if err != nil {
		return nil, f.s.rpcError(ctx, "", err)
	}
	return connect.NewResponse(&pb.GetWatcherEventsResponse{Events: events}), nil
}

// RemoveWatcher stops a watcher.
func (f *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	id, _, err := f.call(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := f.s.watchers.remove(id, req.Msg.GetWatcherId()); err != nil {
		return nil, f.s.rpcError(ctx, "", err)
	}
	return connect.NewResponse(&pb.RemoveWatcherResponse{}), nil
}

// fsEvent is ev, seen under the watched directory dir, on the wire: its name relative to
// dir, and its entry when asked for and it still exists.
func (s *Server) fsEvent(ctx context.Context, id, dir string, ev FsEvent, withEntry bool) *pb.FilesystemEvent {
	name := ev.Name
	if rel, ok := strings.CutPrefix(name, strings.TrimSuffix(dir, "/")+"/"); ok && path.IsAbs(name) {
		name = rel
	}
	out := &pb.FilesystemEvent{Name: name, Type: eventType(ev.Op)}
	if withEntry && ev.Op != "remove" && ev.Op != "rename" {
		if e, err := s.sb.Stat(ctx, id, path.Join(dir, name)); err == nil {
			out.Entry = entryInfo(e)
		}
	}
	return out
}

func eventType(op string) pb.EventType {
	switch op {
	case "create":
		return pb.EventType_EVENT_TYPE_CREATE
	case "write":
		return pb.EventType_EVENT_TYPE_WRITE
	case "remove":
		return pb.EventType_EVENT_TYPE_REMOVE
	case "rename":
		return pb.EventType_EVENT_TYPE_RENAME
	case "chmod":
		return pb.EventType_EVENT_TYPE_CHMOD
	}
	return pb.EventType_EVENT_TYPE_UNSPECIFIED
}

// entryInfo is e on the wire; permissions reads as ls prints it ("-rw-r--r--", "drwxrwxrwt").
// A special file (a FIFO, a socket, a device) has no type of E2B's FileType: it is
// FILE_TYPE_UNSPECIFIED, and its permissions string names its kind ("prw-r--r--").
func entryInfo(e EntryInfo) *pb.EntryInfo {
	out := &pb.EntryInfo{
		Name:        e.Name,
		Path:        e.Path,
		Size:        e.Size,
		Mode:        e.Mode,
		Permissions: lsMode(e),
		Owner:       e.Owner,
		Group:       e.Group,
	}
	switch e.Type {
	case TypeFile:
		out.Type = pb.FileType_FILE_TYPE_FILE
	case TypeDir:
		out.Type = pb.FileType_FILE_TYPE_DIRECTORY
	case TypeSymlink:
		out.Type = pb.FileType_FILE_TYPE_SYMLINK
	}
	if !e.ModTime.IsZero() {
		out.ModifiedTime = timestamppb.New(e.ModTime)
	}
	if e.SymlinkTarget != "" {
		out.SymlinkTarget = &e.SymlinkTarget
	}
	return out
}

// lsMode is e's type and mode bits as ls -l prints them: a type letter, then three rwx
// triples where setuid/setgid show as s (S without x) and sticky as t (T without x).
func lsMode(e EntryInfo) string {
	b := []byte("?rwxrwxrwx")
	switch e.Type {
	case TypeFile:
		b[0] = '-'
	case TypeDir:
		b[0] = 'd'
	case TypeSymlink:
		b[0] = 'l'
	case TypeFIFO:
		b[0] = 'p'
	case TypeSocket:
		b[0] = 's'
	case TypeCharDevice:
		b[0] = 'c'
	case TypeBlockDevice:
		b[0] = 'b'
	}
	for i := range 9 {
		if e.Mode&(1<<(8-i)) == 0 {
			b[1+i] = '-'
		}
	}
	special := func(bit uint32, at int, set byte) {
		if e.Mode&bit == 0 {
			return
		}
		if b[at] == '-' {
			b[at] = set - 'a' + 'A'
		} else {
			b[at] = set
		}
	}
	special(0o4000, 3, 's')
	special(0o2000, 6, 's')
	special(0o1000, 9, 't')
	return string(b)
}
