package sandbox_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/sandboxtest"
)

// TestProcessBadInputIs400 names the field of every bad input, before any guest is called.
func TestProcessBadInputIs400(t *testing.T) {
	m := newLeaseManager(t, sandboxtest.NewFakeBackend(t), sandbox.NewMemRegistry())
	ctx := ctxL(t)
	sb := mustCreate(t, m, "p")
	pid := guest.ProcessSelector{PID: 1}
	start := func(cfg guest.ProcessConfig) error { _, err := m.StartProcess(ctx, sb.ID, cfg); return err }
	for _, tc := range []struct {
		field string
		err   error
	}{
		{"cmd", start(guest.ProcessConfig{})},
		{"args[1]", start(guest.ProcessConfig{Cmd: "x", Args: []string{"a", "b\x00"}})},
		{"env", start(guest.ProcessConfig{Cmd: "x", Env: map[string]string{"A=B": "c"}})},
		{"env[A]", start(guest.ProcessConfig{Cmd: "x", Env: map[string]string{"A": "\x00"}})},
		{"user", start(guest.ProcessConfig{Cmd: "x", User: "a:b"})},
		{"tag", start(guest.ProcessConfig{Cmd: "x", Tag: strings.Repeat("t", 300)})},
		{"cwd", start(guest.ProcessConfig{Cmd: "x", Cwd: "a\x00"})},
		{"selector", m.SendInput(ctx, sb.ID, guest.ProcessSelector{}, nil)},
		{"selector", m.CloseStdin(ctx, sb.ID, guest.ProcessSelector{PID: 1, Tag: "x"})},
		{"signal", m.SignalProcess(ctx, sb.ID, pid, 0)},
		{"data", m.SendInput(ctx, sb.ID, pid, make([]byte, guest.MaxInputBytes+1))},
		{"path", func() error { _, err := m.Stat(ctx, sb.ID, "rel"); return err }()},
		{"depth", func() error { _, err := m.ListDir(ctx, sb.ID, "/", 0); return err }()},
		{"dst", func() error { _, err := m.Move(ctx, sb.ID, "/a", ""); return err }()},
		{"user", func() error { _, err := m.MakeDir(ctx, sb.ID, "/a", "no body"); return err }()},
		{"path", m.RemovePath(ctx, sb.ID, "")},
		{"path", func() error { _, err := m.WatchDir(ctx, sb.ID, "x", false); return err }()},
	} {
		if !errdefs.IsInvalidArgument(tc.err) || !strings.HasPrefix(tc.err.Error(), tc.field+":") {
			t.Errorf("want an invalid-argument error naming %s, got %v", tc.field, tc.err)
		}
	}
	if _, err := m.ConnectProcess(ctx, sb.ID, guest.ProcessSelector{PID: 999999}); !errdefs.IsNotFound(err) {
		t.Errorf("connect to an unknown pid: %v, want not found", err)
	}
	if _, err := m.ListProcesses(ctx, "nosuch"); !errdefs.IsNotFound(err) {
		t.Errorf("processes of an unknown sandbox: %v, want not found", err)
	}
}

// TestProcessStreamLetsTheSandboxGo: an open process stream does not hold the sandbox (a
// checkpoint does not wait for it), goes on when the channel to the guest is cut (the Manager
// re-attaches it), and closes when the sandbox is removed.
func TestProcessStreamLetsTheSandboxGo(t *testing.T) {
	be := sandboxtest.NewFakeBackend(t)
	m := newLeaseManager(t, be, sandbox.NewMemRegistry())
	ctx := ctxL(t)
	sb := mustCreate(t, m, "s")
	ch, err := m.StartProcess(ctx, sb.ID, guest.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", `while read l; do echo "got $l"; done`}, Stdin: true, Tag: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-ch; ev.Kind != guest.ProcessStart {
		t.Fatalf("first event %+v", ev)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second) // BusyWait is 10 s: a held sandbox fails
	if _, err := m.Checkpoint(cctx, sb.ID, ""); err != nil {
		t.Fatalf("checkpoint with a stream open: %v", err)
	}
	cancel()
	sel := guest.ProcessSelector{Tag: "r"}
	var out strings.Builder
	read := func(want string) bool {
		timeout := time.After(time.Second)
		for {
			select {
			case ev, ok := <-ch:
				if !ok {
					t.Fatalf("stream closed waiting for %q", want)
				}
				out.Write(ev.Data)
				if strings.HasSuffix(out.String(), want) {
					return true
				}
			case <-timeout:
				return false
			}
		}
	}
	if err := m.SendInput(ctx, sb.ID, sel, []byte("a\n")); err != nil || !read("got a\n") {
		t.Fatalf("input after a checkpoint: %v (stdout %q)", err, out.String())
	}
	// Cut the channel, as a real checkpoint does; the stream comes back by itself.
	rec, _ := m.Get(ctx, sb.ID)
	inst, err := be.Attach(ctx, sandbox.Spec{ID: rec.EngineID})
	if err != nil {
		t.Fatal(err)
	}
	c := inst.Guest.(*guest.Client)
	c.ResetUpTo(c.Epoch())
	for i := 0; ; i++ {
		if err := m.SendInput(ctx, sb.ID, sel, []byte("b\n")); err != nil {
			t.Fatal(err)
		}
		if read("got b\n") {
			break
		}
		if i == 10 {
			t.Fatalf("the stream was not re-attached after the channel was cut (stdout %q)", out.String())
		}
	}
	if list, err := m.ListProcesses(ctx, sb.ID); err != nil || len(list) != 1 {
		t.Fatalf("ListProcesses = %+v, %v", list, err)
	}
	if err := m.SignalProcess(ctx, sb.ID, sel, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var end guest.ProcessEvent
	for ev := range ch {
		if ev.Kind == guest.ProcessEnd {
			end = ev
		}
	}
	if end.Signal != "SIGTERM" || end.ExitCode != -1 {
		t.Fatalf("end = %+v, want killed by SIGTERM", end)
	}
	// A stream of a removed sandbox closes.
	ch2, err := m.StartProcess(ctx, sb.ID, guest.ProcessConfig{Cmd: "sleep", Args: []string{"3"}})
	if err != nil {
		t.Fatal(err)
	}
	<-ch2
	if err := m.Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-ch2:
		for ok {
			_, ok = <-ch2
		}
	case <-time.After(hangGuard):
		t.Fatal("the stream of a removed sandbox is still open")
	}
}
