package envd

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/zygo-run/zygo/internal/e2b/envd/spec/filesystem/filesystemconnect"
	pb "github.com/zygo-run/zygo/internal/e2b/envd/spec/process"
	"github.com/zygo-run/zygo/internal/e2b/envd/spec/process/processconnect"
)

// harness is a Server over a fakeSandboxes behind a real HTTP server, and clients that
// speak to it as the E2B SDK does (Connect's JSON codec, the sandbox named by header).
type harness struct {
	fake *fakeSandboxes
	srv  *httptest.Server
	// hdr is added to every request of the clients (E2b-Sandbox-Id, ...).
	hdr  http.Header
	http *http.Client
	proc processconnect.ProcessClient
	fs   filesystemconnect.FilesystemClient
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{fake: newFake(), hdr: http.Header{}}
	h.hdr.Set(HeaderSandboxID, fakeID)
	s := New(h.fake, slog.New(slog.DiscardHandler))
	h.srv = httptest.NewServer(s)
	t.Cleanup(func() {
		h.srv.Close()
		s.Close()
	})
	h.http = &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		for k, v := range h.hdr {
			r.Header[k] = v
		}
		return http.DefaultTransport.RoundTrip(r)
	})}
	h.proc = processconnect.NewProcessClient(h.http, h.srv.URL, connect.WithProtoJSON())
	h.fs = filesystemconnect.NewFilesystemClient(h.http, h.srv.URL, connect.WithProtoJSON())
	return h
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantCode fails unless err is a Connect error of code whose message contains part.
func wantCode(t *testing.T, err error, code connect.Code, part string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a Connect error %v", err, code)
	}
	if ce.Code() != code || !strings.Contains(ce.Message(), part) {
		t.Fatalf("err = %v (%v), want code %v with %q", ce.Message(), ce.Code(), code, part)
	}
}

func basicUser(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))
}

// collect reads a process stream to its end: the pid of its start event, stdout, stderr,
// the end event and the number of keepalives.
func collect[T interface{ GetEvent() *pb.ProcessEvent }](t *testing.T, stream interface {
	Receive() bool
	Msg() T
	Err() error
}) (pid uint32, stdout, stderr string, end *pb.ProcessEvent_EndEvent, keepalives int) {
	t.Helper()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			pid = ev.GetStart().GetPid()
		case ev.GetData() != nil:
			stdout += string(ev.GetData().GetStdout())
			stderr += string(ev.GetData().GetStderr())
		case ev.GetEnd() != nil:
			end = ev.GetEnd()
		case ev.GetKeepalive() != nil:
			keepalives++
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return pid, stdout, stderr, end, keepalives
}

func startReq(cmd string, args ...string) *connect.Request[pb.StartRequest] {
	return connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: cmd, Args: args}})
}

func TestStartStreamsOutputAndEnd(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t)
	req := startReq("echo", "hello", "world")
	req.Msg.Process.Envs = map[string]string{"A": "1"}
	cwd := "proj"
	req.Msg.Process.Cwd = &cwd
	req.Header().Set("Authorization", basicUser("alice"))
	stream, err := h.proc.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	pid, out, _, end, _ := collect[*pb.StartResponse](t, stream)
	if pid == 0 || out != "hello world\n" || end == nil || end.GetExitCode() != 0 || !end.GetExited() || end.Error != nil {
		t.Fatalf("pid %d stdout %q end %v", pid, out, end)
	}
	got := h.fake.started[0]
	if got.User != "alice" || got.Cwd != "proj" || got.Env["A"] != "1" || got.Stdin != true {
		t.Fatalf("started %+v: want user alice, cwd proj (the backend resolves it), env A=1, stdin (absent: true)", got)
	}

	// A non-zero exit: the error the SDK's CommandExitError shows.
	stream, err = h.proc.Start(ctx, startReq("fail"))
	if err != nil {
		t.Fatal(err)
	}
	_, _, errOut, end, _ := collect[*pb.StartResponse](t, stream)
	if errOut != "boom\n" || end.GetExitCode() != 3 || end.GetError() != "exit status 3" || end.GetStatus() != "exit status 3" {
		t.Fatalf("stderr %q end %v", errOut, end)
	}
	if h.fake.started[1].User != DefaultUser {
		t.Fatalf("user %q without Authorization, want %q", h.fake.started[1].User, DefaultUser)
	}
}

func TestStartErrors(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t)
	recv := func(req *connect.Request[pb.StartRequest]) error {
		stream, err := h.proc.Start(ctx, req)
		if err != nil {
			return err
		}
		for stream.Receive() {
		}
		return stream.Err()
	}
	wantCode(t, recv(connect.NewRequest(&pb.StartRequest{})), connect.CodeInvalidArgument, "process is missing")
	wantCode(t, recv(startReq("")), connect.CodeInvalidArgument, "process.cmd is empty")
	wantCode(t, recv(startReq("nope")), connect.CodeNotFound, `command "nope"`)
	pty := startReq("echo")
	pty.Msg.Pty = &pb.PTY{}
	wantCode(t, recv(pty), connect.CodeUnimplemented, "pty")
	env := startReq("echo")
	env.Msg.Process.Envs = map[string]string{"A=B": "1"}
	wantCode(t, recv(env), connect.CodeInvalidArgument, "process.envs")
	bad := startReq("echo")
	bad.Header().Set("Authorization", "Bearer x")
	wantCode(t, recv(bad), connect.CodeInvalidArgument, "Authorization")
	ka := startReq("echo")
	ka.Header().Set(headerKeepalive, "soon")
	wantCode(t, recv(ka), connect.CodeInvalidArgument, headerKeepalive)

	h.hdr.Del(HeaderSandboxID)
	wantCode(t, recv(startReq("echo")), connect.CodeInvalidArgument, HeaderSandboxID)
	// A sandbox that does not run: unavailable, which the SDK raises as TimeoutError.
	h.hdr.Set(HeaderSandboxID, "gone")
	wantCode(t, recv(startReq("echo")), connect.CodeUnavailable, "sandbox gone is not running")
}

func TestBackgroundProcessInputSignalConnectList(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t)
	req := startReq("cat")
	tag := "svc"
	req.Msg.Tag = &tag
	stdin := true
	req.Msg.Stdin = &stdin
	req.Header().Set(headerKeepalive, "1")
	stream, err := h.proc.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start event: %v", stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()

	list, err := h.proc.List(ctx, connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.Msg.GetProcesses()); n != 1 || list.Msg.Processes[0].GetPid() != pid || list.Msg.Processes[0].GetTag() != "svc" || list.Msg.Processes[0].GetConfig().GetCmd() != "cat" {
		t.Fatalf("list = %v", list.Msg)
	}

	// A second client connects by tag: it gets a start event with the pid first.
	conn, err := h.proc.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "svc"}}}))
	if err != nil {
		t.Fatal(err)
	}
	if !conn.Receive() || conn.Msg().GetEvent().GetStart().GetPid() != pid {
		t.Fatalf("connect's first event = %v, %v; want start with pid %d", conn.Msg(), conn.Err(), pid)
	}

	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	if _, err := h.proc.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("ping\n")}}})); err != nil {
		t.Fatal(err)
	}
	// StreamInput: a start naming the process, then data, in order.
	in := h.proc.StreamInput(ctx)
	for _, m := range []*pb.StreamInputRequest{
		{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: sel}}},
		{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("a")}}}}},
		{Event: &pb.StreamInputRequest_Keepalive{Keepalive: &pb.StreamInputRequest_KeepAlive{}}},
		{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("b\n")}}}}},
	} {
		if err := in.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatal(err)
	}
	// Let a keepalive through (asked for every second), then kill.
	time.Sleep(1100 * time.Millisecond)
	if _, err := h.proc.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: pb.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatal(err)
	}
	_, out, _, end, keepalives := collect[*pb.StartResponse](t, stream)
	if out != "ping\nab\n" || end.GetExitCode() != -1 || end.GetExited() || end.GetStatus() != "signal: killed" || end.GetError() != "signal: killed" {
		t.Fatalf("stdout %q end %v", out, end)
	}
	if keepalives == 0 {
		t.Fatal("no keepalive event in 1.1 s with Keepalive-Ping-Interval: 1")
	}
	_, out2, _, end2, _ := collect[*pb.ConnectResponse](t, conn)
	if out2 != "ping\nab\n" || end2.GetExitCode() != -1 {
		t.Fatalf("connected stream: stdout %q end %v", out2, end2)
	}

	// The process is gone: the SDK's kill answers false on not_found.
	_, err = h.proc.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: pb.Signal_SIGNAL_SIGKILL}))
	wantCode(t, err, connect.CodeNotFound, "not found")
	_, err = h.proc.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: sel}))
	wantCode(t, err, connect.CodeInvalidArgument, "signal SIGNAL_UNSPECIFIED")
	_, err = h.proc.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: sel}))
	wantCode(t, err, connect.CodeNotFound, "process")
	wantCode(t, connectErr(ctx, h, &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "nope"}}), connect.CodeNotFound, `process with tag "nope"`)
	wantCode(t, connectErr(ctx, h, nil), connect.CodeInvalidArgument, "process is missing")
	_, err = h.proc.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel}))
	wantCode(t, err, connect.CodeInvalidArgument, "input is missing")
}

// connectErr is the error of a Connect call on sel.
func connectErr(ctx context.Context, h *harness, sel *pb.ProcessSelector) error {
	stream, err := h.proc.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: sel}))
	if err != nil {
		return err
	}
	for stream.Receive() {
	}
	return stream.Err()
}

func TestCloseStdinEndsProcess(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t)
	stream, err := h.proc.Start(ctx, startReq("cat"))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	if _, err := h.proc.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
		if end := stream.Msg().GetEvent().GetEnd(); end != nil && (end.GetExitCode() != 0 || end.Error != nil) {
			t.Fatalf("end %v, want exit 0", end)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestStartDeadlineDetaches(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	stream, err := h.proc.Start(ctx, startReq("cat"))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	wantCode(t, stream.Err(), connect.CodeDeadlineExceeded, "")
	// The process keeps running (E2B's background semantics).
	list, err := h.proc.List(ctxT(t), connect.NewRequest(&pb.ListRequest{}))
	if err != nil || len(list.Msg.GetProcesses()) != 1 {
		t.Fatalf("list after the deadline: %v, %v; want the process still running", list, err)
	}
}
