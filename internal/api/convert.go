package api

// The edge: every answer is a wire type, made here from the daemon's own. No store, zygote,
// guest, function or sandbox type is serialised directly, so their JSON tags are theirs to
// change, and a field added to a record is not published by accident.

import (
	"io/fs"
	"time"

	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/secret"
	"github.com/zygo-run/zygo/internal/store"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

func deployResultOf(r *function.DeployResult) wire.DeployResult {
	out := wire.DeployResult{Name: r.Name, Version: r.Version, Unchanged: r.Unchanged, Mode: string(r.Mode),
		Fallback: r.Fallback, ReadyMs: r.ReadyMs, Warnings: r.Warnings}
	for _, c := range r.Checks {
		out.Checks = append(out.Checks, wire.Check{Name: c.Name, Level: c.Level, Detail: c.Detail})
	}
	return out
}

func functionOf(st function.Status) wire.Function {
	out := wire.Function{Name: st.Name, Version: st.Version, Runtime: string(st.Runtime), Mode: string(st.Mode),
		State: st.State, Fallback: st.Fallback, ZygotePID: st.ZygotePID, InFlight: st.InFlight, Queued: st.Queued, Deploying: st.Deploying,
		IdleWorkers: st.IdleWorkers, Served: st.Served}
	if m := st.Manifest; m != nil {
		l := m.Limits
		out.Manifest = &wire.Manifest{Name: m.Name, Runtime: string(m.Runtime), Handler: m.Handler, Mode: string(m.Mode),
			Interpreter: m.Interpreter, Secrets: m.Secrets, Strict: m.Strict, Concurrency: m.Concurrency, Queue: m.QueueLen(),
			PreFork: m.PreFork, PoolSize: m.PoolSize, Env: m.Env, PythonPath: m.PythonPath,
			Limits: wire.FunctionLimits{TimeoutMs: l.TimeoutMs, MemoryMiB: l.MemoryMiB, PIDs: l.PIDs, CPUMs: l.CPUMs,
				MaxRequestKiB: l.MaxRequestKiB, MaxResponseKiB: l.MaxResponseKiB, ImportTimeoutMs: l.ImportTimeoutMs}}
	}
	return out
}

func functionsOf(sts []function.Status) []wire.Function {
	out := make([]wire.Function, 0, len(sts))
	for _, st := range sts {
		out = append(out, functionOf(st))
	}
	return out
}

func logLinesOf(lines []store.LogLine) []wire.LogLine {
	out := make([]wire.LogLine, 0, len(lines))
	for _, l := range lines {
		out = append(out, wire.LogLine{ID: l.ID, Function: l.Function, Version: l.Version, RequestID: l.RequestID,
			CallerID: l.CallerID, Stream: l.Stream, At: l.At, Line: l.Line})
	}
	return out
}

func secretsOf(ms []secret.Meta) []wire.SecretMeta {
	out := make([]wire.SecretMeta, 0, len(ms))
	for _, m := range ms {
		out = append(out, wire.SecretMeta{Name: m.Name, UpdatedAt: m.UpdatedAt})
	}
	return out
}

func servicesOf(svcs []guest.Service) []wire.Service {
	var out []wire.Service
	for _, s := range svcs {
		out = append(out, wire.Service{Name: s.Name, Argv: s.Argv, Env: s.Env, OnFork: string(s.OnFork),
			Signal: s.Signal, Restart: string(s.Restart)})
	}
	return out
}

func createOptionsOf(o sandbox.CreateOptions) wire.CreateSandboxBody {
	b := wire.CreateSandboxBody{Name: o.Name, RootfsDir: o.RootfsDir, Services: servicesOf(o.Services), Env: o.Env,
		Secrets: o.Secrets, MemoryMiB: o.MemoryMiB, PIDs: o.PIDs, CPUs: o.CPUs, Template: o.Template,
		TimeoutMS: o.Lifecycle.Timeout.Milliseconds(), OnTimeout: o.Lifecycle.OnTimeout, Metadata: o.Metadata}
	if n := o.Network; n.Mode != "" || len(n.Allow) > 0 || len(n.Deny) > 0 {
		b.Network = &wire.SandboxNetwork{Mode: n.Mode, Allow: n.Allow, Deny: n.Deny}
	}
	return b
}

// createOptionsFrom is the request's side of createOptionsOf.
func createOptionsFrom(b wire.CreateSandboxBody) sandbox.CreateOptions {
	o := sandbox.CreateOptions{Name: b.Name, RootfsDir: b.RootfsDir, Env: b.Env, Secrets: b.Secrets,
		MemoryMiB: b.MemoryMiB, PIDs: b.PIDs, CPUs: b.CPUs, Template: b.Template, Metadata: b.Metadata,
		Lifecycle: sandbox.Lifecycle{Timeout: millis(b.TimeoutMS), OnTimeout: b.OnTimeout}}
	if n := b.Network; n != nil {
		o.Network = sandbox.NetworkOptions{Mode: n.Mode, Allow: n.Allow, Deny: n.Deny}
	}
	for _, s := range b.Services {
		o.Services = append(o.Services, guest.Service{Name: s.Name, Argv: s.Argv, Env: s.Env,
			OnFork: guest.OnFork(s.OnFork), Signal: s.Signal, Restart: guest.Restart(s.Restart)})
	}
	return o
}

func sandboxOf(r sandbox.SandboxRecord) wire.Sandbox {
	s := wire.Sandbox{ID: r.ID, Name: r.Name, Backend: r.Backend, EngineID: r.EngineID, State: string(r.State),
		ParentID: r.ParentID, CheckpointID: r.CheckpointID, Generation: r.Generation,
		Options: createOptionsOf(r.Options), Services: servicesOf(r.Services), Error: r.Error,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if r.Net != nil {
		s.Address, s.MAC = r.Net.Address, r.Net.MAC
	}
	if exp := r.Options.Lifecycle.ExpiresAt; !exp.IsZero() {
		s.ExpiresAt = &exp
	}
	return s
}

// millis is a timeout_ms field as a duration; a negative one stays negative, for the
// Manager to refuse naming the field.
func millis(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

func sandboxesOf(rs []sandbox.SandboxRecord) []wire.Sandbox {
	out := make([]wire.Sandbox, 0, len(rs))
	for _, r := range rs {
		out = append(out, sandboxOf(r))
	}
	return out
}

func checkpointOf(c sandbox.CheckpointRecord) wire.Checkpoint {
	out := wire.Checkpoint{ID: c.ID, Tag: c.Tag, SandboxID: c.SandboxID, ParentID: c.ParentID, Backend: c.Backend,
		SizeBytes: c.SizeBytes, Generation: c.Generation, Hostname: c.Hostname,
		Options: createOptionsOf(c.Options), CreatedAt: c.CreatedAt, Checksums: c.Checksums, Lost: c.Lost}
	if o := c.Origin; o != nil {
		out.Origin = &wire.CheckpointOrigin{CheckpointID: o.CheckpointID, SandboxID: o.SandboxID, Tag: o.Tag}
	}
	return out
}

func checkpointsOf(cs []sandbox.CheckpointRecord) []wire.Checkpoint {
	out := make([]wire.Checkpoint, 0, len(cs))
	for _, c := range cs {
		out = append(out, checkpointOf(c))
	}
	return out
}

func exitStatusOf(st guest.ExitStatus) *wire.ExitStatus {
	return &wire.ExitStatus{Code: st.Code, Signal: st.Signal, TimedOut: st.TimedOut}
}

func codeResultOf(r guest.CodeResult) *wire.CodeResult {
	return &wire.CodeResult{OK: r.OK, Value: r.Value, Error: r.Error, OutputTruncated: r.OutputTruncated, Restarted: r.Restarted}
}

func fileInfosOf(infos []guest.FileInfo) []wire.FileInfo {
	out := make([]wire.FileInfo, 0, len(infos))
	for _, f := range infos {
		out = append(out, wire.FileInfo{Name: f.Name, Size: f.Size, Mode: fs.FileMode(f.Mode), ModTime: f.ModTime, IsDir: f.IsDir})
	}
	return out
}

func serviceStatusesOf(sts []guest.ServiceStatus) []wire.ServiceStatus {
	out := make([]wire.ServiceStatus, 0, len(sts))
	for _, s := range sts {
		ws := wire.ServiceStatus{Name: s.Name, Restart: string(s.Restart), Running: s.Running, PID: s.PID,
			Restarts: s.Restarts, LastExitAt: s.LastExitAt, LastError: s.LastError, NextRestartAt: s.NextRestartAt, Log: s.Log}
		if s.LastExit != nil {
			ws.LastExit = exitStatusOf(*s.LastExit)
		}
		out = append(out, ws)
	}
	return out
}

func forkProgressOf(p sandbox.ForkProgress) *wire.ForkProgress {
	return &wire.ForkProgress{Checkpoint: p.Checkpoint, N: p.N, Ready: p.Ready, Failed: p.Failed}
}
