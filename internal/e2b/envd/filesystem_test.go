package envd

import (
	"log/slog"
	"testing"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/zygo-run/zygo/internal/e2b/envd/spec/filesystem"
	"github.com/zygo-run/zygo/internal/errdefs"
)

func TestFilesystemCalls(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t)
	h.fake.files["/home/user/a.txt"] = []byte("hello")

	st, err := h.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "a.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	e := st.Msg.GetEntry()
	if e.GetPath() != "/home/user/a.txt" || e.GetName() != "a.txt" || e.GetType() != fspb.FileType_FILE_TYPE_FILE ||
		e.GetSize() != 5 || e.GetMode() != 0o644 || e.GetPermissions() != "-rw-r--r--" || e.GetOwner() != "user" ||
		!e.GetModifiedTime().AsTime().Equal(fakeTime) {
		t.Fatalf("stat = %v", e)
	}
	_, err = h.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/nope"}))
	wantCode(t, err, connect.CodeNotFound, "/nope")
	_, err = h.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{}))
	wantCode(t, err, connect.CodeInvalidArgument, "path is empty")
	// ".." never leaves the sandbox's root: it is just a path inside.
	_, err = h.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "../../../../etc/x"}))
	wantCode(t, err, connect.CodeNotFound, "/etc/x")

	// A relative path is relative to the home of the user the Authorization header names.
	md := connect.NewRequest(&fspb.MakeDirRequest{Path: "d/e"})
	md.Header().Set("Authorization", basicUser("root"))
	mk, err := h.fs.MakeDir(ctx, md)
	if err != nil {
		t.Fatal(err)
	}
	if mk.Msg.GetEntry().GetPath() != "/root/d/e" || mk.Msg.GetEntry().GetType() != fspb.FileType_FILE_TYPE_DIRECTORY ||
		mk.Msg.GetEntry().GetPermissions() != "drwxr-xr-x" || h.fake.owners["/root/d/e"] != "root" {
		t.Fatalf("makeDir = %v, owner %q", mk.Msg.GetEntry(), h.fake.owners["/root/d/e"])
	}
	_, err = h.fs.MakeDir(ctx, md)
	wantCode(t, err, connect.CodeAlreadyExists, "/root/d/e")
	unknown := connect.NewRequest(&fspb.StatRequest{Path: "x"})
	unknown.Header().Set("Authorization", basicUser("bob"))
	_, err = h.fs.Stat(ctx, unknown)
	wantCode(t, err, connect.CodeInvalidArgument, `user "bob"`)

	mv, err := h.fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "a.txt", Destination: "/home/user/b.txt"}))
	if err != nil || mv.Msg.GetEntry().GetPath() != "/home/user/b.txt" {
		t.Fatalf("move = %v, %v", mv, err)
	}
	_, err = h.fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "a.txt"}))
	wantCode(t, err, connect.CodeInvalidArgument, "destination is empty")

	h.fake.dirs["/home/user/sub"] = true
	h.fake.files["/home/user/sub/c"] = nil
	ls, err := h.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/home/user"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(ls.Msg.GetEntries()); got != "/home/user/b.txt /home/user/sub" {
		t.Fatalf("list depth 0 (= 1) = %s", got)
	}
	ls, err = h.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/home/user", Depth: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(ls.Msg.GetEntries()); got != "/home/user/b.txt /home/user/sub /home/user/sub/c" {
		t.Fatalf("list depth 2 = %s", got)
	}
	_, err = h.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/", Depth: 1000}))
	wantCode(t, err, connect.CodeInvalidArgument, "depth 1000")

	if _, err := h.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "b.txt"})); err != nil {
		t.Fatal(err)
	}
	_, err = h.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "b.txt"}))
	wantCode(t, err, connect.CodeNotFound, "b.txt")
	_, err = h.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "/.."}))
	wantCode(t, err, connect.CodeInvalidArgument, "root")
}

func names(es []*fspb.EntryInfo) string {
	var s string
	for i, e := range es {
		if i > 0 {
			s += " "
		}
		s += e.GetPath()
	}
	return s
}

func TestWatchDirStream(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t)
	req := connect.NewRequest(&fspb.WatchDirRequest{Path: "/home/user", IncludeEntry: true})
	stream, err := h.fs.WatchDir(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("first event = %v, %v; want start", stream.Msg(), stream.Err())
	}
	h.fake.touch("/home/user", "new.txt")
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	ev := stream.Msg().GetFilesystem()
	if ev.GetName() != "new.txt" || ev.GetType() != fspb.EventType_EVENT_TYPE_CREATE || ev.GetEntry().GetPath() != "/home/user/new.txt" {
		t.Fatalf("event = %v", ev)
	}
	if err := stream.Close(); err != nil {
		t.Fatal(err)
	}
	// Closing the call ends the watch in the sandbox.
	deadline := time.Now().Add(5 * time.Second)
	for h.fake.watching("/home/user") {
		if time.Now().After(deadline) {
			t.Fatal("the watch still runs 5 s after the client closed the stream")
		}
		time.Sleep(10 * time.Millisecond)
	}

	bad, err := h.fs.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: "/nope"}))
	if err == nil {
		for bad.Receive() {
		}
		err = bad.Err()
	}
	wantCode(t, err, connect.CodeNotFound, "/nope")
}

func TestPollingWatcher(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t)
	cw, err := h.fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/home/user"}))
	if err != nil {
		t.Fatal(err)
	}
	wid := cw.Msg.GetWatcherId()
	h.fake.touch("/home/user", "one")
	h.fake.touch("/home/user", "two")
	var got []string
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < 2 && time.Now().Before(deadline) {
		ev, err := h.fs.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: wid}))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ev.Msg.GetEvents() {
			got = append(got, e.GetName())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(got) != 2 || got[0] != "one" || got[1] != "two" {
		t.Fatalf("events = %v, want [one two]", got)
	}
	// Another sandbox cannot read it.
	h.hdr.Set(HeaderSandboxID, otherID)
	_, err = h.fs.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: wid}))
	wantCode(t, err, connect.CodeNotFound, "watcher")
	h.hdr.Set(HeaderSandboxID, fakeID)
	if _, err := h.fs.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: wid})); err != nil {
		t.Fatal(err)
	}
	_, err = h.fs.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: wid}))
	wantCode(t, err, connect.CodeNotFound, "watcher")
	_, err = h.fs.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: wid}))
	wantCode(t, err, connect.CodeNotFound, "watcher")
}

func TestForgetDropsWatchers(t *testing.T) {
	fake := newFake()
	s := New(fake, slog.New(slog.DiscardHandler))
	defer s.Close()
	wid, err := s.watchers.create(s, fakeID, "/home/user", false, false)
	if err != nil {
		t.Fatal(err)
	}
	s.Forget(fakeID)
	if _, err := s.watchers.take(fakeID, wid); !errdefs.IsNotFound(err) {
		t.Fatalf("take after Forget: %v, want not found", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for fake.watching("/home/user") {
		if time.Now().After(deadline) {
			t.Fatal("the watch still runs 5 s after Forget")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLsModeNamesTypeAndSpecialBits(t *testing.T) {
	for _, c := range []struct {
		e    EntryInfo
		want string
	}{
		{EntryInfo{Type: TypeDir, Mode: 0o1777}, "drwxrwxrwt"},
		{EntryInfo{Type: TypeDir, Mode: 0o1770}, "drwxrwx--T"},
		{EntryInfo{Type: TypeFile, Mode: 0o4755}, "-rwsr-xr-x"},
		{EntryInfo{Type: TypeFile, Mode: 0o2644}, "-rw-r-Sr--"},
		{EntryInfo{Type: TypeFIFO, Mode: 0o644}, "prw-r--r--"},
		{EntryInfo{Type: TypeCharDevice, Mode: 0o666}, "crw-rw-rw-"},
		{EntryInfo{Type: TypeBlockDevice, Mode: 0o660}, "brw-rw----"},
		{EntryInfo{Type: TypeSocket, Mode: 0o777}, "srwxrwxrwx"},
		{EntryInfo{Type: TypeSymlink, Mode: 0o777}, "lrwxrwxrwx"},
	} {
		if got := lsMode(c.e); got != c.want {
			t.Errorf("lsMode(%s %o) = %q, want %q", c.e.Type, c.e.Mode, got, c.want)
		}
		if pe := entryInfo(c.e); c.e.Type != TypeFile && c.e.Type != TypeDir && c.e.Type != TypeSymlink && pe.GetType() != fspb.FileType_FILE_TYPE_UNSPECIFIED {
			t.Errorf("entryInfo(%s).Type = %v, want FILE_TYPE_UNSPECIFIED (E2B has no such type)", c.e.Type, pe.GetType())
		}
	}
}
