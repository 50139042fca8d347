package envd

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/zygo-run/zygo/internal/e2b/envd/spec/process"
	"github.com/zygo-run/zygo/internal/e2b/envd/spec/process/processconnect"
	"github.com/zygo-run/zygo/internal/errdefs"
)

const (
	// maxEnvs bounds the environment variables of one process.
	maxEnvs = 1024
	// maxTagBytes bounds a process tag.
	maxTagBytes = 256
	// maxKeepalive bounds the keepalive interval a client may ask for.
	maxKeepalive = time.Hour
)

// processService is process.Process over the Server's Sandboxes.
type processService struct{ s *Server }

var _ processconnect.ProcessHandler = (*processService)(nil)

// Start starts a process and streams its start event (the pid), output and end. Ending the
// call (the SDK's timeout or disconnect) detaches from the process; it keeps running.
func (p *processService) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	id, err := sandboxIDFrom(ctx)
	if err != nil {
		return p.s.rpcError(ctx, "", err)
	}
	cfg, err := startConfig(req.Msg, req.Header())
	if err != nil {
		return p.s.rpcError(ctx, "", err)
	}
	every, err := keepaliveInterval(req.Header())
	if err != nil {
		return p.s.rpcError(ctx, "", err)
	}
	events, err := p.s.sb.StartProcess(ctx, id, cfg)
	if err != nil {
		return p.s.rpcError(ctx, id, fmt.Errorf("starting %q: %w", cfg.Cmd, p.s.streams.explain(id, err)))
	}
	release, _ := p.s.streams.acquire(id, procStream) // processes are not capped here (the guest caps them)
	defer release()
	return p.s.relayProcess(ctx, id, events, every, func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.StartResponse{Event: ev})
	})
}

// Connect streams a running process: a start event with its pid first (as for Start),
// then its output from now on and its end.
func (p *processService) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	id, err := sandboxIDFrom(ctx)
	if err != nil {
		return p.s.rpcError(ctx, "", err)
	}
	sel, err := selector("process", req.Msg.GetProcess())
	if err != nil {
		return p.s.rpcError(ctx, "", err)
	}
	every, err := keepaliveInterval(req.Header())
	if err != nil {
		return p.s.rpcError(ctx, "", err)
	}
	events, err := p.s.sb.ConnectProcess(ctx, id, sel)
	if err != nil {
		return p.s.rpcError(ctx, id, fmt.Errorf("connecting to %s: %w", sel, p.s.streams.explain(id, err)))
	}
	release, _ := p.s.streams.acquire(id, procStream) // processes are not capped here (the guest caps them)
	defer release()
	return p.s.relayProcess(ctx, id, events, every, func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.ConnectResponse{Event: ev})
	})
}

// List lists the running processes started through the API.
func (p *processService) List(ctx context.Context, _ *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	id, err := sandboxIDFrom(ctx)
	if err != nil {
		return nil, p.s.rpcError(ctx, "", err)
	}
	procs, err := p.s.sb.ListProcesses(ctx, id)
	if err != nil {
		return nil, p.s.rpcError(ctx, id, fmt.Errorf("listing processes: %w", err))
	}
	out := &pb.ListResponse{Processes: make([]*pb.ProcessInfo, 0, len(procs))}
	for _, pr := range procs {
		info := &pb.ProcessInfo{
			Pid: pr.PID,
			Config: &pb.ProcessConfig{
				Cmd:  pr.Config.Cmd,
				Args: pr.Config.Args,
				Envs: pr.Config.Env,
			},
		}
		if pr.Tag != "" {
			info.Tag = &pr.Tag
		}
		if pr.Config.Cwd != "" {
			info.Config.Cwd = &pr.Config.Cwd
		}
		out.Processes = append(out.Processes, info)
	}
	return connect.NewResponse(out), nil
}

// Update would resize a PTY; Zygo runs processes without one.
func (p *processService) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	if _, err := selector("process", req.Msg.GetProcess()); err != nil {
		return nil, p.s.rpcError(ctx, "", err)
	}
	if req.Msg.Pty != nil {
		return nil, p.s.rpcError(ctx, "", unsupportedf("pty: Zygo runs processes without a terminal"))
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

// SendInput writes to a process's stdin.
func (p *processService) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	id, err := sandboxIDFrom(ctx)
	if err != nil {
		return nil, p.s.rpcError(ctx, "", err)
	}
	sel, err := selector("process", req.Msg.GetProcess())
	if err != nil {
		return nil, p.s.rpcError(ctx, "", err)
	}
	data, err := stdinOf("input", req.Msg.GetInput())
	if err != nil {
		return nil, p.s.rpcError(ctx, "", err)
	}
	if err := p.s.sb.SendInput(ctx, id, sel, data); err != nil {
		return nil, p.s.rpcError(ctx, id, fmt.Errorf("sending input to %s: %w", sel, err))
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

// StreamInput writes a stream of input to one process, in order: a start event naming the
// process, then data events (keepalives are ignored).
func (p *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	id, err := sandboxIDFrom(ctx)
	if err != nil {
		return nil, p.s.rpcError(ctx, "", err)
	}
	var sel *ProcessSelector
	for n := 0; stream.Receive(); n++ {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			s, err := selector(fmt.Sprintf("message %d: start.process", n), ev.Start.GetProcess())
			if err != nil {
				return nil, p.s.rpcError(ctx, "", err)
			}
			sel = &s
		case *pb.StreamInputRequest_Data:
			if sel == nil {
				return nil, p.s.rpcError(ctx, "", invalidf("message %d: data before a start event naming the process", n))
			}
			data, err := stdinOf(fmt.Sprintf("message %d: data.input", n), ev.Data.GetInput())
			if err != nil {
				return nil, p.s.rpcError(ctx, "", err)
			}
			if err := p.s.sb.SendInput(ctx, id, *sel, data); err != nil {
				return nil, p.s.rpcError(ctx, id, fmt.Errorf("sending input to %s: %w", sel, err))
			}
		case *pb.StreamInputRequest_Keepalive:
		default:
			return nil, p.s.rpcError(ctx, "", invalidf("message %d: event is empty: want start, data or keepalive", n))
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

// SendSignal sends SIGTERM or SIGKILL to a process.
func (p *processService) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	id, err := sandboxIDFrom(ctx)
	if err != nil {
		return nil, p.s.rpcError(ctx, "", err)
	}
	sel, err := selector("process", req.Msg.GetProcess())
	if err != nil {
		return nil, p.s.rpcError(ctx, "", err)
	}
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	case pb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	default:
		return nil, p.s.rpcError(ctx, "", invalidf("signal %s: want SIGNAL_SIGTERM (15) or SIGNAL_SIGKILL (9)", req.Msg.GetSignal()))
	}
	if err := p.s.sb.SignalProcess(ctx, id, sel, sig); err != nil {
		return nil, p.s.rpcError(ctx, id, fmt.Errorf("signalling %s: %w", sel, err))
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

// CloseStdin closes a process's stdin.
func (p *processService) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	id, err := sandboxIDFrom(ctx)
	if err != nil {
		return nil, p.s.rpcError(ctx, "", err)
	}
	sel, err := selector("process", req.Msg.GetProcess())
	if err != nil {
		return nil, p.s.rpcError(ctx, "", err)
	}
	if err := p.s.sb.CloseStdin(ctx, id, sel); err != nil {
		return nil, p.s.rpcError(ctx, id, fmt.Errorf("closing the stdin of %s: %w", sel, err))
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

// String names the process sel selects, for messages.
func (sel ProcessSelector) String() string {
	if sel.PID != 0 {
		return fmt.Sprintf("process %d", sel.PID)
	}
	return fmt.Sprintf("process with tag %q", sel.Tag)
}

// startConfig is the ProcessConfig of a StartRequest, validated; the user comes from the
// request's Authorization header.
func startConfig(m *pb.StartRequest, h http.Header) (ProcessConfig, error) {
	user, err := userFromHeader(h)
	if err != nil {
		return ProcessConfig{}, err
	}
	pc := m.GetProcess()
	switch {
	case pc == nil:
		return ProcessConfig{}, invalidf("process is missing: want {cmd, args, envs, cwd}")
	case pc.GetCmd() == "":
		return ProcessConfig{}, invalidf("process.cmd is empty: want a command")
	case m.Pty != nil:
		return ProcessConfig{}, unsupportedf("pty: Zygo runs processes without a terminal (use commands.run)")
	case len(m.GetTag()) > maxTagBytes:
		return ProcessConfig{}, invalidf("tag is %d bytes long: at most %d", len(m.GetTag()), maxTagBytes)
	}
	for i, a := range append([]string{pc.GetCmd(), m.GetTag()}, pc.GetArgs()...) {
		if strings.IndexByte(a, 0) >= 0 {
			return ProcessConfig{}, invalidf("process argument %d contains a NUL byte", i)
		}
	}
	if err := checkEnvs(pc.GetEnvs()); err != nil {
		return ProcessConfig{}, err
	}
	cfg := ProcessConfig{
		Cmd:   pc.GetCmd(),
		Args:  pc.GetArgs(),
		Env:   pc.GetEnvs(),
		User:  user,
		Tag:   m.GetTag(),
		Stdin: m.Stdin == nil || m.GetStdin(), // absent: older SDKs, which always had stdin
	}
	if cwd := pc.GetCwd(); cwd != "" {
		if err := checkPath("process.cwd", cwd); err != nil {
			return ProcessConfig{}, err
		}
		if cwd == "~" || strings.HasPrefix(cwd, "~/") { // the backend resolves it: relative
			cwd = strings.TrimLeft(cwd[1:], "/")
		}
		cfg.Cwd = cwd
	}
	return cfg, nil
}

// checkEnvs validates process.envs: at most maxEnvs, names without '=' or NUL, values
// without NUL.
func checkEnvs(envs map[string]string) error {
	if len(envs) > maxEnvs {
		return invalidf("process.envs has %d entries: at most %d", len(envs), maxEnvs)
	}
	for k, v := range envs {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return invalidf("process.envs: name %q: want a non-empty name without '=' or NUL", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return invalidf("process.envs: %s: the value contains a NUL byte", k)
		}
	}
	return nil
}

// selector is the ProcessSelector of s; field names it in errors.
func selector(field string, s *pb.ProcessSelector) (ProcessSelector, error) {
	switch v := s.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		if v.Pid == 0 {
			return ProcessSelector{}, invalidf("%s.pid is 0: want the pid of a process", field)
		}
		return ProcessSelector{PID: v.Pid}, nil
	case *pb.ProcessSelector_Tag:
		if v.Tag == "" || len(v.Tag) > maxTagBytes {
			return ProcessSelector{}, invalidf("%s.tag: want a tag of 1 to %d bytes", field, maxTagBytes)
		}
		return ProcessSelector{Tag: v.Tag}, nil
	default:
		return ProcessSelector{}, invalidf("%s is missing: want {pid} or {tag}", field)
	}
}

// stdinOf is the stdin bytes of in; field names it in errors.
func stdinOf(field string, in *pb.ProcessInput) ([]byte, error) {
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		return v.Stdin, nil
	case *pb.ProcessInput_Pty:
		return nil, unsupportedf("%s.pty: Zygo runs processes without a terminal", field)
	default:
		return nil, invalidf("%s is missing: want {stdin}", field)
	}
}

// keepaliveInterval is how often a server stream sends keepalive events: the seconds of
// the Keepalive-Ping-Interval header, none without it.
func keepaliveInterval(h http.Header) (time.Duration, error) {
	v := h.Get(headerKeepalive)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, invalidf("header %s: %q: want a whole number of seconds, at least 1", headerKeepalive, v)
	}
	return min(time.Duration(n)*time.Second, maxKeepalive), nil
}

// relayProcess sends events to the client through send until the process's end (then it
// returns nil), and a keepalive every interval (none when 0). A stream that closes before
// the end is an error: the call's own end (the SDK's timeout, a disconnect) or the
// sandbox's.
func (s *Server) relayProcess(ctx context.Context, id string, events <-chan ProcessEvent, every time.Duration, send func(*pb.ProcessEvent) error) error {
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
					return s.rpcError(ctx, id, err)
				}
				return s.rpcError(ctx, id, fmt.Errorf("the process's output ended before its exit: %w", errdefs.ErrUnavailable))
			}
			if pe := processEvent(ev); pe != nil {
				if err := send(pe); err != nil {
					return err
				}
			}
			if ev.Kind == EventEnd {
				return nil
			}
		case <-tick:
			if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return s.rpcError(ctx, id, ctx.Err())
		}
	}
}

func startEvent(pid uint32) *pb.ProcessEvent {
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: pid}}}
}

// processEvent is ev on the wire; nil for a kind it does not know. An end carries E2B's fields: exited (false when killed
// by a signal), status as Go's os.ProcessState prints it ("exit status 1", "signal:
// killed"), and an error when the process did not exit 0 (the SDK's CommandExitError
// message), as E2B's envd does.
func processEvent(ev ProcessEvent) *pb.ProcessEvent {
	switch ev.Kind {
	case EventStart:
		return startEvent(ev.PID)
	case EventStdout:
		return &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: ev.Data}}}}
	case EventStderr:
		return &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: ev.Data}}}}
	case EventEnd:
		return &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: endEvent(ev)}}
	}
	return nil
}

// endEvent is the end event ev on the wire.
func endEvent(ev ProcessEvent) *pb.ProcessEvent_EndEvent {
	end := &pb.ProcessEvent_EndEvent{ExitCode: int32(ev.ExitCode), Exited: ev.Signal == "" && ev.Error == ""}
	switch {
	case ev.Signal != "":
		end.Status = "signal: " + signalText(ev.Signal)
	case ev.Error != "" && ev.ExitCode == 0:
		end.Status = ev.Error
	default:
		end.Status = "exit status " + strconv.Itoa(ev.ExitCode)
	}
	if msg := ev.Error; msg != "" || ev.ExitCode != 0 || ev.Signal != "" {
		if msg == "" {
			msg = end.Status
		}
		end.Error = &msg
	}
	return end
}

// signalText is how Go names a signal ("killed" for "SIGKILL"); the name itself when it is
// not one.
func signalText(name string) string {
	if sig := unix.SignalNum(name); sig != 0 {
		return sig.String()
	}
	return name
}
