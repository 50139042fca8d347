package gvisor_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// procStream reads one process stream of the Manager in the test's goroutine.
type procStream struct {
	ch  <-chan guest.ProcessEvent
	out strings.Builder // stdout so far
}

// openedStream takes the start event of a stream just opened: openedStream(t)(m.StartProcess(...)).
func openedStream(t *testing.T) func(<-chan guest.ProcessEvent, error) (*procStream, uint32) {
	return func(ch <-chan guest.ProcessEvent, err error) (*procStream, uint32) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-ch:
			if ev.Kind != guest.ProcessStart || ev.PID == 0 {
				t.Fatalf("first event %+v, want a start", ev)
			}
			return &procStream{ch: ch}, ev.PID
		case <-time.After(20 * time.Second):
			t.Fatal("no start event")
		}
		return nil, 0
	}
}

// within reads until stdout ends with want or d has passed; it reports whether it did.
func (s *procStream) within(t *testing.T, want string, d time.Duration) bool {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case ev, ok := <-s.ch:
			if !ok {
				t.Fatalf("stream closed waiting for %q (stdout %q)", want, s.out.String())
			}
			if ev.Kind == guest.ProcessStdout {
				s.out.Write(ev.Data)
				if strings.HasSuffix(s.out.String(), want) {
					return true
				}
			}
		case <-timeout:
			return false
		}
	}
}

// until reads until stdout ends with want, or until the end event when want is "" (which it
// returns).
func (s *procStream) until(t *testing.T, want string) guest.ProcessEvent {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-s.ch:
			if !ok {
				t.Fatalf("stream closed waiting for %q (stdout %q)", want, s.out.String())
			}
			switch ev.Kind {
			case guest.ProcessStdout:
				s.out.Write(ev.Data)
				if want != "" && strings.HasSuffix(s.out.String(), want) {
					return ev
				}
			case guest.ProcessEnd:
				if want == "" {
					return ev
				}
				t.Fatalf("end %+v waiting for %q (stdout %q)", ev, want, s.out.String())
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %q (stdout %q)", want, s.out.String())
		}
	}
}

// TestManagerProcessesForkAndFiles, on a real sandbox: a background process run as a user
// of the rootfs's /etc/passwd takes input, outlives the call that started it, is followed
// from a second call, listed, and after a fork is in the child too (same pid and tag), where
// it is signalled; the parent's stream goes on across the fork's checkpoint. Then stat, list,
// mkdir, move, remove and a recursive watch.
func TestManagerProcessesForkAndFiles(t *testing.T) {
	h := newHarness(t, nil)
	ctx := tctx(t)
	sb, err := h.m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	passwd := h.file(t, sb.ID, "/etc/passwd") + "user:x:1000:1000:user:/home/user:/bin/sh\n"
	group := h.file(t, sb.ID, "/etc/group") + "user:x:1000:\n"
	if err := h.m.PutFile(ctx, sb.ID, "/etc/passwd", 0o644, strings.NewReader(passwd)); err != nil {
		t.Fatal(err)
	}
	if err := h.m.PutFile(ctx, sb.ID, "/etc/group", 0o644, strings.NewReader(group)); err != nil {
		t.Fatal(err)
	}
	// Files and directories as a user are made with the user's credentials: "user" may not
	// make /home/user (/home is root's), write /etc/passwd or into /root, nor read a
	// root-only file; an unknown user is the caller's error.
	if _, err := h.m.MakeDir(ctx, sb.ID, "/home/user", "user"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("MakeDir /home/user as user = %v; want permission denied", err)
	}
	if st, err := h.m.Exec(ctx, sb.ID, guest.ExecRequest{Argv: []string{"sh", "-c",
		"mkdir -p /home/user && chown user:user /home/user && echo s3cr3t > /root/secret && chmod 600 /root/secret && mkfifo /tmp/fifo"}}, io.Discard, io.Discard); err != nil || st.Code != 0 {
		t.Fatalf("setting up /home/user = %+v, %v", st, err)
	}
	if e, err := h.m.MakeDir(ctx, sb.ID, "/home/user/d", "user"); err != nil || e.Owner != "user" || e.Group != "user" || e.Type != guest.EntryDir {
		t.Fatalf("MakeDir /home/user/d = %+v, %v", e, err)
	}
	for _, p := range []string{"/etc/passwd", "/root/owned", "/etc/new/f"} {
		if err := h.m.PutFileAs(ctx, sb.ID, p, 0o644, "user", strings.NewReader("pwned")); !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Fatalf("PutFileAs(%s) as user = %v; want permission denied", p, err)
		}
	}
	if got := h.file(t, sb.ID, "/etc/passwd"); got != passwd {
		t.Fatalf("/etc/passwd after a refused write = %q", got)
	}
	if err := h.m.GetFileAs(ctx, sb.ID, "/root/secret", "user", io.Discard); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("GetFileAs(/root/secret) as user = %v; want permission denied", err)
	}
	var secret strings.Builder
	if err := h.m.GetFileAs(ctx, sb.ID, "/root/secret", "root", &secret); err != nil || secret.String() != "s3cr3t\n" {
		t.Fatalf("GetFileAs(/root/secret) as root = %q, %v", secret.String(), err)
	}
	if err := h.m.GetFileAs(ctx, sb.ID, "/etc/hostname", "ghost", io.Discard); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("GetFileAs as an unknown user = %v; want invalid argument", err)
	}
	// ReplaceFile (how a multipart upload commits) renames a file over another whole, and
	// refuses to replace a directory.
	if err := h.m.PutFileAs(ctx, sb.ID, "/home/user/.staged", 0o644, "user", strings.NewReader("new")); err != nil {
		t.Fatal(err)
	}
	if err := h.m.PutFileAs(ctx, sb.ID, "/home/user/target", 0o644, "user", strings.NewReader("old")); err != nil {
		t.Fatal(err)
	}
	if err := h.m.ReplaceFile(ctx, sb.ID, "/home/user/.staged", "/home/user/d"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("ReplaceFile over a directory = %v; want invalid argument", err)
	}
	if err := h.m.ReplaceFile(ctx, sb.ID, "/home/user/.staged", "/home/user/target"); err != nil {
		t.Fatal(err)
	}
	if got := h.file(t, sb.ID, "/home/user/target"); got != "new" {
		t.Fatalf("/home/user/target after ReplaceFile = %q, want new", got)
	}
	if _, err := h.m.Stat(ctx, sb.ID, "/home/user/.staged"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Stat(staged) after ReplaceFile = %v; want not found", err)
	}
	// Special files keep their type; /tmp keeps its sticky bit.
	if e, err := h.m.Stat(ctx, sb.ID, "/tmp/fifo"); err != nil || e.Type != guest.EntryFIFO {
		t.Fatalf("Stat(/tmp/fifo) = %+v, %v; want type %s", e, err, guest.EntryFIFO)
	}
	if e, err := h.m.Stat(ctx, sb.ID, "/tmp"); err != nil || e.Mode&0o1000 == 0 {
		t.Fatalf("Stat(/tmp) = %+v, %v; want the sticky bit", e, err)
	}

	if err := h.m.PutFileAs(ctx, sb.ID, "/home/user/new/f.txt", 0o644, "user", strings.NewReader("hi")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/home/user/new", "/home/user/new/f.txt"} {
		if e, err := h.m.Stat(ctx, sb.ID, p); err != nil || e.Owner != "user" {
			t.Fatalf("Stat(%s) after PutFileAs = %+v, %v; want owned by user", p, e, err)
		}
	}

	startCtx, detach := context.WithCancel(ctx)
	s1, pid := openedStream(t)(h.m.StartProcess(startCtx, sb.ID, guest.ProcessConfig{Cmd: "/bin/sh",
		Args: []string{"-c", `while read l; do echo "got $l $(id -u) $(pwd) $GREETING"; done; echo bye`},
		User: "user", Tag: "reader", Stdin: true, Env: map[string]string{"GREETING": "hi"}}))
	sel := guest.ProcessSelector{Tag: "reader"}
	if err := h.m.SendInput(ctx, sb.ID, sel, []byte("a\n")); err != nil {
		t.Fatal(err)
	}
	s1.until(t, "got a 1000 /home/user hi\n")
	detach() // background: the process stays

	s2, pid2 := openedStream(t)(h.m.ConnectProcess(ctx, sb.ID, sel))
	if pid2 != pid {
		t.Fatalf("ConnectProcess by tag: pid %d, want %d", pid2, pid)
	}
	if err := h.m.SendInput(ctx, sb.ID, guest.ProcessSelector{PID: pid}, []byte("b\n")); err != nil {
		t.Fatal(err)
	}
	s2.until(t, "got b 1000 /home/user hi\n")
	list, err := h.m.ListProcesses(ctx, sb.ID)
	if err != nil || len(list) != 1 || list[0].PID != pid || list[0].Tag != "reader" || list[0].Config.User != "user" {
		t.Fatalf("ListProcesses = %+v, %v", list, err)
	}

	res, err := h.m.Fork(ctx, sb.ID, sandbox.ForkOptions{N: 1})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	kid := res.Children[0].Sandbox.ID
	if kl, err := h.m.ListProcesses(ctx, kid); err != nil || len(kl) != 1 || kl[0].PID != pid || kl[0].Tag != "reader" {
		t.Fatalf("the child's processes = %+v, %v; want the parent's", kl, err)
	}
	k, kpid := openedStream(t)(h.m.ConnectProcess(ctx, kid, sel))
	if kpid != pid {
		t.Fatalf("the child's process has pid %d, want %d", kpid, pid)
	}
	if err := h.m.SendInput(ctx, kid, sel, []byte("c\n")); err != nil {
		t.Fatal(err)
	}
	k.until(t, "got c 1000 /home/user hi\n")
	// The parent's stream was cut by the fork's checkpoint and is re-attached by the Manager
	// (by now, most likely: the children's restore and reseal took longer than the re-attach);
	// output made before the re-attach is lost, so input is sent again until a line arrives.
	for i := 0; ; i++ {
		if err := h.m.SendInput(ctx, sb.ID, sel, []byte("d\n")); err != nil {
			t.Fatal(err)
		}
		if s2.within(t, "got d 1000 /home/user hi\n", time.Second) {
			t.Logf("the parent's stream, re-attached after the fork, answered input %d", i+1)
			break
		}
		if i == 10 {
			t.Fatalf("the parent's stream was not re-attached after the fork (stdout %q)", s2.out.String())
		}
	}
	if strings.Contains(s2.out.String(), "got c") {
		t.Fatalf("the child's input reached the parent: %q", s2.out.String())
	}
	if err := h.m.SignalProcess(ctx, kid, sel, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if end := k.until(t, ""); end.ExitCode != -1 || end.Signal != "SIGKILL" {
		t.Fatalf("the child's end = %+v, want killed by SIGKILL", end)
	}
	if err := h.m.CloseStdin(ctx, sb.ID, sel); err != nil {
		t.Fatal(err)
	}
	s2.until(t, "bye\n")
	if end := s2.until(t, ""); end.ExitCode != 0 {
		t.Fatalf("the parent's end = %+v, want exit code 0", end)
	}
	if err := h.m.SignalProcess(ctx, sb.ID, sel, syscall.SIGTERM); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("signal to an ended process: %v, want ErrNotFound", err)
	}

	// A rollback to the fork's checkpoint brings the process back as it was (same pid and tag,
	// running); a stream open on the replaced instance closes without an end.
	s3, _ := openedStream(t)(h.m.StartProcess(ctx, sb.ID, guest.ProcessConfig{Cmd: "sleep", Args: []string{"30"}}))
	if _, err := h.m.Rollback(ctx, sb.ID, res.Checkpoint.ID); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	for ev := range s3.ch {
		if ev.Kind == guest.ProcessEnd {
			t.Fatalf("a stream of the replaced instance got an end: %+v", ev)
		}
	}
	if rl, err := h.m.ListProcesses(ctx, sb.ID); err != nil || len(rl) != 1 || rl[0].PID != pid || rl[0].Tag != "reader" {
		t.Fatalf("processes after the rollback = %+v, %v; want the checkpoint's", rl, err)
	}

	// Files.
	if _, err := h.m.MakeDir(ctx, sb.ID, "/tmp/w/a", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.MakeDir(ctx, sb.ID, "/tmp/w/a", ""); !errors.Is(err, errdefs.ErrExists) {
		t.Fatalf("MakeDir of an existing dir: %v, want ErrExists", err)
	}
	wctx, unwatch := context.WithCancel(ctx)
	defer unwatch()
	watch, err := h.m.WatchDir(wctx, sb.ID, "/tmp/w", true)
	if err != nil {
		t.Fatal(err)
	}
	h.sh(t, sb.ID, "echo x > /tmp/w/a/f")
	for seen := false; !seen; {
		select {
		case ev := <-watch:
			seen = ev.Name == "a/f" && ev.Op == "create"
		case <-time.After(20 * time.Second):
			t.Fatal("the watch saw no create of a/f")
		}
	}
	ls, err := h.m.ListDir(ctx, sb.ID, "/tmp/w", 2)
	var names []string
	for _, e := range ls {
		names = append(names, e.Path)
	}
	if err != nil || strings.Join(names, " ") != "/tmp/w/a /tmp/w/a/f" {
		t.Fatalf("ListDir = %v, %v", names, err)
	}
	if e, err := h.m.Move(ctx, sb.ID, "/tmp/w/a/f", "/tmp/w/b/g"); err != nil || e.Path != "/tmp/w/b/g" || e.Size != 2 || e.Type != guest.EntryFile {
		t.Fatalf("Move = %+v, %v", e, err)
	}
	if e, err := h.m.Stat(ctx, sb.ID, "/tmp/w/b/g"); err != nil || e.Owner != "root" || e.Mode&0o777 == 0 {
		t.Fatalf("Stat = %+v, %v", e, err)
	}
	if err := h.m.RemovePath(ctx, sb.ID, "/tmp/w"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.Stat(ctx, sb.ID, "/tmp/w"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Stat after RemovePath: %v, want ErrNotFound", err)
	}
	if _, err := h.m.Stat(ctx, sb.ID, "tmp"); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "path") {
		t.Fatalf("Stat of a relative path: %v, want ErrInvalidArgument naming path", err)
	}
	var out bytes.Buffer
	if st, err := h.m.Exec(ctx, kid, guest.ExecRequest{Argv: []string{"cat", "/etc/passwd"}}, &out, nil); err != nil || st.Code != 0 || !strings.Contains(out.String(), "user:x:1000") {
		t.Fatalf("the child's /etc/passwd: %q %+v %v", out.String(), st, err)
	}
}
