package guest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// startProcPair is startPair that also returns the agent's root (where its /etc/passwd is).
func startProcPair(t *testing.T) (*Client, string) {
	t.Helper()
	c, sock := startPair(t, strings.Repeat("p", 64))
	return c, filepath.Join(filepath.Dir(sock), "root")
}

// collector gathers a process stream's events in a goroutine.
type collector struct {
	events chan ProcessEvent
}

func collect(ch <-chan ProcessEvent) *collector {
	c := &collector{events: make(chan ProcessEvent, 1024)}
	go func() {
		for ev := range ch {
			c.events <- ev
		}
		close(c.events)
	}()
	return c
}

// waitOutput reads events until stdout has held want (as a suffix of all stdout so far).
func (c *collector) waitOutput(t *testing.T, want string) {
	t.Helper()
	var out strings.Builder
	timeout := time.After(15 * time.Second)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				t.Fatalf("stream closed before stdout held %q (had %q)", want, out.String())
			}
			if ev.Kind == ProcessStdout {
				out.Write(ev.Data)
				if strings.HasSuffix(out.String(), want) {
					return
				}
			}
		case <-timeout:
			t.Fatalf("stdout never held %q (had %q)", want, out.String())
		}
	}
}

// waitEnd reads events until the end event and returns it.
func (c *collector) waitEnd(t *testing.T) ProcessEvent {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				t.Fatal("stream closed without an end event")
			}
			if ev.Kind == ProcessEnd {
				return ev
			}
		case <-timeout:
			t.Fatal("no end event")
		}
	}
}

func first(t *testing.T, ch <-chan ProcessEvent) ProcessEvent {
	t.Helper()
	select {
	case ev := <-ch:
		if ev.Kind != ProcessStart || ev.PID == 0 {
			t.Fatalf("first event = %+v, want a start with a pid", ev)
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no start event")
	}
	return ProcessEvent{}
}

// TestProcessBackgroundStdinConnect: a process with stdin outlives the stream that started
// it, takes input, is followed by a second stream (by tag), is listed, and ends with its code
// when its stdin closes; a connect after the end gets the end at once.
func TestProcessBackgroundStdinConnect(t *testing.T) {
	c, _ := startProcPair(t)
	ctx := waitCtx(t)
	sctx, detach := context.WithCancel(ctx)
	ch, err := c.StartProcess(sctx, ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", `while read l; do echo "got $l"; done; echo bye; exit 3`},
		Tag: "echo", Stdin: true, Env: map[string]string{"FOO": "bar"}})
	if err != nil {
		t.Fatal(err)
	}
	pid := first(t, ch).PID
	one := collect(ch)
	sel := ProcessSelector{Tag: "echo"}
	if err := c.SendInput(ctx, sel, []byte("a\n")); err != nil {
		t.Fatal(err)
	}
	one.waitOutput(t, "got a\n")
	detach() // the process keeps running
	ch2, err := c.ConnectProcess(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	if got := first(t, ch2).PID; got != pid {
		t.Fatalf("connect by tag: pid %d, want %d", got, pid)
	}
	two := collect(ch2)
	if err := c.SendInput(ctx, ProcessSelector{PID: pid}, []byte("b\n")); err != nil {
		t.Fatal(err)
	}
	two.waitOutput(t, "got b\n")
	list, err := c.ListProcesses(ctx)
	if err != nil || len(list) != 1 || list[0].PID != pid || list[0].Tag != "echo" || list[0].Config.Env["FOO"] != "bar" || !list[0].Config.Stdin {
		t.Fatalf("ListProcesses = %+v, %v", list, err)
	}
	if err := c.CloseStdin(ctx, sel); err != nil {
		t.Fatal(err)
	}
	two.waitOutput(t, "bye\n")
	if end := two.waitEnd(t); end.ExitCode != 3 || end.Signal != "" || end.PID != pid {
		t.Fatalf("end = %+v, want exit code 3", end)
	}
	if list, err := c.ListProcesses(ctx); err != nil || len(list) != 0 {
		t.Fatalf("ListProcesses after the end = %+v, %v", list, err)
	}
	// Late: the end at once, by pid (a stream re-attached after a checkpoint).
	late, err := c.ConnectProcess(ctx, ProcessSelector{PID: pid})
	if err != nil {
		t.Fatal(err)
	}
	first(t, late)
	if end := collect(late).waitEnd(t); end.ExitCode != 3 {
		t.Fatalf("late end = %+v", end)
	}
	if err := c.SendInput(ctx, sel, []byte("x")); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `tag "echo"`) {
		t.Fatalf("input to an ended process: %v, want not found naming the tag", err)
	}
}

func TestProcessSignalAndErrors(t *testing.T) {
	c, _ := startProcPair(t)
	ctx := waitCtx(t)
	ch, err := c.StartProcess(ctx, ProcessConfig{Cmd: "sleep", Args: []string{"100"}, Tag: "sleeper"})
	if err != nil {
		t.Fatal(err)
	}
	pid := first(t, ch).PID
	got := collect(ch)
	if _, err := c.StartProcess(ctx, ProcessConfig{Cmd: "true", Tag: "sleeper"}); !errors.Is(err, errdefs.ErrExists) {
		t.Errorf("a second process with the tag: %v, want ErrExists", err)
	}
	if err := c.SendInput(ctx, ProcessSelector{PID: pid}, []byte("x")); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("input without stdin: %v, want ErrFailedPrecondition", err)
	}
	if err := c.SignalProcess(ctx, ProcessSelector{PID: pid}, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if end := got.waitEnd(t); end.ExitCode != -1 || end.Signal != "SIGKILL" || end.Error == "" {
		t.Fatalf("end = %+v, want killed by SIGKILL", end)
	}
	for _, tc := range []struct {
		name string
		err  error
		want error
		text string
	}{
		{"unknown pid", c.SignalProcess(ctx, ProcessSelector{PID: 999999}, syscall.SIGTERM), errdefs.ErrNotFound, "pid 999999"},
		{"unknown tag", c.CloseStdin(ctx, ProcessSelector{Tag: "nope"}), errdefs.ErrNotFound, `tag "nope"`},
		{"missing program", startErr(ctx, c, ProcessConfig{Cmd: "/no/such/program"}), errdefs.ErrNotFound, "/no/such/program"},
		{"unknown user", startErr(ctx, c, ProcessConfig{Cmd: "true", User: "ghost"}), errdefs.ErrInvalidArgument, `user "ghost"`},
		{"missing cwd", startErr(ctx, c, ProcessConfig{Cmd: "true", Cwd: "/no/such/dir"}), errdefs.ErrNotFound, "/no/such/dir"},
	} {
		if !errors.Is(tc.err, tc.want) || !strings.Contains(fmt.Sprint(tc.err), tc.text) {
			t.Errorf("%s: %v, want %v naming %s", tc.name, tc.err, tc.want, tc.text)
		}
	}
	if _, err := c.ConnectProcess(ctx, ProcessSelector{PID: 999999}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("connect to an unknown pid: %v", err)
	}
}

func startErr(ctx context.Context, c *Client, cfg ProcessConfig) error {
	ch, err := c.StartProcess(ctx, cfg)
	if err == nil {
		for range ch {
		}
		return errors.New("started")
	}
	return err
}

// TestProcessUserEnvCwd: the user's home, name and ids come from the root's /etc/passwd; the
// cwd defaults to the home; Env is added.
func TestProcessUserEnvCwd(t *testing.T) {
	c, root := startProcPair(t)
	ctx := waitCtx(t)
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/bin/sh\ntester:x:%d:%d:T:%s:/bin/sh\n", os.Getuid(), os.Getgid(), home)
	if err := os.WriteFile(filepath.Join(root, "etc/passwd"), []byte(passwd), 0o644); err != nil {
		t.Fatal(err)
	}
	ch, err := c.StartProcess(ctx, ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", `echo "$HOME $USER $FOO $(pwd) $(id -u)"`},
		User: "tester", Env: map[string]string{"FOO": "bar"}})
	if err != nil {
		t.Fatal(err)
	}
	first(t, ch)
	got := collect(ch)
	got.waitOutput(t, fmt.Sprintf("%s tester bar %s %d\n", home, home, os.Getuid()))
	if end := got.waitEnd(t); end.ExitCode != 0 {
		t.Fatalf("end = %+v", end)
	}
	u, err := c.UserInfo(ctx, "tester")
	if err != nil || u.Home != home || u.UID != uint32(os.Getuid()) {
		t.Fatalf("UserInfo = %+v, %v", u, err)
	}
	if _, err := c.UserInfo(ctx, "ghost"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("UserInfo(ghost) = %v", err)
	}
}

// TestProcessOutputWithoutListener: a detached process that writes far more than any buffer
// runs to its end: the agent reads and drops output nobody listens to.
func TestProcessOutputWithoutListener(t *testing.T) {
	c, _ := startProcPair(t)
	ctx := waitCtx(t)
	mark := filepath.Join(t.TempDir(), "done")
	sctx, detach := context.WithCancel(ctx)
	ch, err := c.StartProcess(sctx, ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "head -c 50000000 /dev/zero; echo > " + mark}})
	if err != nil {
		t.Fatal(err)
	}
	first(t, ch)
	detach()
	for range ch {
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(mark); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a detached process with 50 MB of output never finished")
		}
	}
}

// TestProcessSlowListener: a listener that does not read holds the process's output back
// (backpressure) instead of growing the agent; once it reads, everything arrives in order.
func TestProcessSlowListener(t *testing.T) {
	c, _ := startProcPair(t)
	ctx := waitCtx(t)
	mark := filepath.Join(t.TempDir(), "done")
	const total = 16 << 20
	ch, err := c.StartProcess(ctx, ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", fmt.Sprintf("head -c %d /dev/zero; echo > %s", total, mark)}})
	if err != nil {
		t.Fatal(err)
	}
	first(t, ch)
	time.Sleep(500 * time.Millisecond)
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("the process wrote 16 MiB while its only listener read nothing: output was buffered without bound")
	}
	n := 0
	for ev := range ch {
		n += len(ev.Data)
		if ev.Kind == ProcessEnd {
			break
		}
	}
	if n != total {
		t.Fatalf("read %d bytes, want %d", n, total)
	}
}

func TestFsOperations(t *testing.T) {
	c, _ := startProcPair(t)
	ctx := waitCtx(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a/b/c"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "a/f.txt"), []byte("hello"), 0o640)
	os.Symlink("f.txt", filepath.Join(dir, "a/link"))
	e, err := c.Stat(ctx, filepath.Join(dir, "a/f.txt"))
	if err != nil || e.Type != EntryFile || e.Size != 5 || e.Mode != 0o640 || e.Name != "f.txt" || e.Owner == "" {
		t.Fatalf("Stat = %+v, %v", e, err)
	}
	if e, err := c.Stat(ctx, filepath.Join(dir, "a/link")); err != nil || e.Type != EntrySymlink || e.SymlinkTarget != "f.txt" {
		t.Fatalf("Stat(link) = %+v, %v", e, err)
	}
	if _, err := c.Stat(ctx, filepath.Join(dir, "nope")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Stat(missing) = %v", err)
	}
	names := func(es []EntryInfo) string {
		var s []string
		for _, e := range es {
			s = append(s, strings.TrimPrefix(e.Path, dir+"/"))
		}
		return strings.Join(s, " ")
	}
	l1, err := c.ListDir(ctx, filepath.Join(dir, "a"), 1)
	if err != nil || names(l1) != "a/b a/f.txt a/link" {
		t.Fatalf("ListDir depth 1 = %q, %v", names(l1), err)
	}
	l3, err := c.ListDir(ctx, dir, 3)
	if err != nil || names(l3) != "a a/b a/b/c a/f.txt a/link" {
		t.Fatalf("ListDir depth 3 = %q, %v", names(l3), err)
	}
	big := filepath.Join(dir, "big")
	os.Mkdir(big, 0o755)
	for i := 0; i <= MaxDirEntries; i++ {
		if f, err := os.Create(filepath.Join(big, fmt.Sprint(i))); err == nil {
			f.Close()
		}
	}
	if _, err := c.ListDir(ctx, big, 1); !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "10000") {
		t.Fatalf("ListDir of %d entries = %v, want too large naming the bound", MaxDirEntries+1, err)
	}
	os.RemoveAll(big)
	if _, err := c.ListDir(ctx, filepath.Join(dir, "a/f.txt"), 1); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("ListDir(file) = %v", err)
	}
	mk := filepath.Join(dir, "x/y/z")
	if e, err := c.MakeDir(ctx, mk, ""); err != nil || e.Type != EntryDir || e.Path != mk {
		t.Fatalf("MakeDir = %+v, %v", e, err)
	}
	if _, err := c.MakeDir(ctx, mk, ""); !errors.Is(err, errdefs.ErrExists) {
		t.Fatalf("MakeDir(existing) = %v", err)
	}
	dst := filepath.Join(dir, "moved/f2.txt")
	if e, err := c.Move(ctx, filepath.Join(dir, "a/f.txt"), dst); err != nil || e.Path != dst || e.Size != 5 {
		t.Fatalf("Move = %+v, %v", e, err)
	}
	if _, err := c.Move(ctx, filepath.Join(dir, "a/f.txt"), dst); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Move(missing src) = %v", err)
	}
	if _, err := c.Move(ctx, filepath.Join(dir, "a/link"), dst); !errors.Is(err, errdefs.ErrExists) {
		t.Fatalf("Move onto an existing dst = %v", err)
	}
	if err := c.RemovePath(ctx, filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Fatalf("a after RemovePath: %v", err)
	}
	if err := c.RemovePath(ctx, filepath.Join(dir, "a")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("RemovePath(missing) = %v", err)
	}
}

func TestWatchDir(t *testing.T) {
	c, _ := startProcPair(t)
	ctx := waitCtx(t)
	dir := t.TempDir()
	wctx, stop := context.WithCancel(ctx)
	ch, err := c.WatchDir(wctx, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	want := func(name, op string) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case ev, ok := <-ch:
				if !ok {
					t.Fatalf("watch closed before %s %s", op, name)
				}
				if ev.Name == name && ev.Op == op {
					return
				}
			case <-timeout:
				t.Fatalf("no %s of %s", op, name)
			}
		}
	}
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	want("f", "create")
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	want("sub", "create")
	time.Sleep(100 * time.Millisecond) // the new directory's watch is added after its create event
	os.WriteFile(filepath.Join(dir, "sub/g"), []byte("x"), 0o644)
	want("sub/g", "create")
	os.Remove(filepath.Join(dir, "f"))
	want("f", "remove")
	stop()
	for range ch {
	}
	if _, err := c.WatchDir(ctx, filepath.Join(dir, "nope"), false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("WatchDir(missing) = %v", err)
	}
}

func TestLineReaderBound(t *testing.T) {
	l := newLineReader(strings.NewReader(strings.Repeat("x", 300<<10)+"\n"), 256<<10)
	if _, err := l.next(); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("a line over the bound: %v", err)
	}
	l = newLineReader(strings.NewReader("{}\nab\n"), 16)
	if b, err := l.next(); err != nil || string(b) != "{}" {
		t.Fatalf("next = %q, %v", b, err)
	}
}
