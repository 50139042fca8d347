// Package agentproc runs one language agent process in a bubblewrap sandbox
// and serves requests from it, following docs/protocol.md: a fork zygote
// (ModeFork), a one-request interpreter (ModeSpawn) or a Node worker
// (ModeWorker).
//
// Lifecycle: Start launches bwrap with the agent, which imports the user's
// code and answers ready (state Ready) or import_error (Start fails with
// *ImportError). In fork mode, Run asks the zygote to fork a child per
// request; in spawn and worker mode the process serves exactly one Run and exits. Drain
// stops new requests and waits for in-flight ones; Stop kills the sandbox.
// Done is closed when the sandbox process has exited, for whatever reason.
//
// A Process is safe for concurrent use: many Runs may be in flight at once.
package agentproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/nsbox"
	"github.com/zygo-run/zygo/internal/untrusted"
)

// Mode mirrors function.Mode without importing it.
type Mode string

const (
	ModeFork  Mode = "fork"
	ModeSpawn Mode = "spawn"
	// ModeWorker is a Node worker: a fresh process that serves one request
	// it receives on its control channel (docs/protocol.md, worker protocol).
	ModeWorker Mode = "worker"
)

// Spec says what to start.
type Spec struct {
	Box     nsbox.Spec // Interpreter, Args and Env are filled in by Start
	Runtime string     // "python" (later "node")
	Handler string     // "module:function"
	Mode    Mode
	Env     []string // the function's environment, KEY=VALUE
	// PythonPath are directories of the code (relative to nsbox.CodeDir, checked by the
	// caller) the Python agent puts on sys.path right after it, in order (zygo.toml's
	// python_path). Python only.
	PythonPath []string
	// MemoryMiB is the function's zygote_memory_mib (MiB; 0: none), the
	// limit of the sandbox's own cgroup where cgroups are managed, passed to
	// the Python agent as --memory-mib: a fork-mode zygote puts its code and
	// heap on huge pages only while what the sandbox holds stays within half
	// of it (agents/python/zygo_agent/hugetext.py), a bound without cgroups
	// too. NoHugePages passes --no-huge-pages: none at all.
	MemoryMiB   int
	NoHugePages bool
	// RunDir is a host directory private to this zygote; Start creates
	// RunDir/req (bound at /run/zygo/req), RunDir/scratch/tmp (bound at
	// /tmp) and RunDir/scratch/shm (bound at /dev/shm).
	RunDir string
	// RunTmpfsMiB, when > 0, makes RunDir, and RunDir/scratch inside it,
	// two tmpfs of that many MiB each (nodev, nosuid, noexec, noswap where
	// the kernel has it) that Start mounts and Stop unmounts (rundir.go); it
	// needs root. 0 leaves RunDir on the filesystem of its parent, and /tmp
	// and /dev/shm unbounded.
	RunTmpfsMiB int
	// Secrets asks for RunDir/secrets (mode 0500, owned by the sandbox uid),
	// bound read-only at /run/secrets; SecretsDir returns its host path.
	Secrets bool
	// StrictFilter is the raw BPF program (internal/seccomp.Strict) written
	// into the request directory as strict.bpf for requests with Strict set.
	StrictFilter []byte
	// PreFork is the ceiling of children kept forked ahead of demand (fork
	// mode; 0 disables pre-forking).
	PreFork int
	// Cgroup, when set, makes the sandbox's own cgroup (with its limits) and
	// moves host pid (bwrap's) into it; Start then moves the sandbox's
	// process in too, all before the agent runs (bwrap --block-fd), and
	// Stop deletes it. Processes the agent starts are born in it; a fork
	// zygote's children stay there until Hold or a request's BeforeGo
	// moves them. nil: the sandbox shares the daemon's cgroups.
	Cgroup func(ctx context.Context, hostPID int) (Cgroup, error)
	// Hold, when set, readies a child for its request ahead of demand: it
	// runs, off the request path, for each pre-forked child once it has
	// said hello and before it joins the pool, and for a Node worker once
	// it is ready (the function runtime moves it into its request cgroup
	// there: see Held). A child whose Hold failed is not used. nil: the
	// request's BeforeGo does it all.
	Hold func(ctx context.Context, hostPID int) (Held, error)
	// ReadyTimeout bounds the import and warm-up, default 60 s.
	ReadyTimeout time.Duration
	// Output receives the lines the agent process prints on its own stdout
	// and stderr (import-time prints, agent diagnostics), in order, a batch
	// at a time, bounded per stream over the zygote's life (output.go).
	// requestID is empty, except for spawned agents and Node workers after
	// GO, whose process is the request: what reaches the sandbox's pipes
	// then (both agents point fds 1 and 2 at the request's files before
	// user code, so only what bubblewrap or a step before that says) belongs
	// to it, is bounded and redacted (Request.Redact) like its files, and
	// arrives in one batch per stream when the process has exited, after
	// the answer. Output must not block for long:
	// it runs on the goroutine that drains the pipe. May be nil.
	Output func(requestID, stream string, lines []string)
	Log    *slog.Logger
}

// ImportError is what Start returns when the user's code fails to import.
type ImportError struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback"`
}

func (e *ImportError) Error() string {
	return fmt.Sprintf("importing handler: %s: %s", e.Type, e.Message)
}

func (e *ImportError) Unwrap() error { return errdefs.ErrFailedPrecondition }

// Ready is what the agent reported at the end of warm-up.
type Ready struct {
	PID      int     // the zygote's pid inside its pid namespace
	HostPID  int     // the zygote's pid on the host (SCM_CREDENTIALS of its ready message)
	Python   string  // interpreter version
	OpenSSL  string  // libcrypto version
	ForkSafe bool    // false when threads were alive at warm-up
	Checks   []Check // warm-up findings
	Took     time.Duration
}

// Process is one running agent sandbox.
type Process struct {
	spec    Spec
	log     *slog.Logger
	cmd     *exec.Cmd
	ctl     channel
	reqRoot string // host dir bound at /run/zygo/req
	// root is reqRoot, open from makeDirs until Stop (or Start's failure)
	// closes it: every request directory is made and removed through it.
	root    *untrusted.Dir
	ready   Ready
	done    chan struct{} // closed when the process has exited
	exitErr error         // set before done is closed
	// childPID receives the sandbox process's host pid from readStatus
	// (once, after pid1fd is set); release is the write end of its
	// --block-fd pipe (with Spec.Cgroup), closed by wait after bwrap exits
	// (guarded by mu).
	childPID chan int
	blockW   *os.File
	// pid1Known is closed once pid1 holds the sandbox's PID 1 (readStatus).
	pid1Known chan struct{}
	pid1      int       // the host pid of the sandbox's PID 1 (the agent); set once, before pid1Known closes
	nice      childNice // what lowerZygotePriority did (priority.go); set before the pool's first fork

	sendMu  sync.Mutex      // serialises writes on ctl
	pool    *pool           // pre-forked children (fork mode with PreFork > 0)
	dirs    chan requestDir // empty request directories made ahead of demand (with a pool)
	current atomic.Value    // *outputOwner: the request a spawned agent or worker serves, after GO
	watcher *resultWatcher

	tailMu     sync.Mutex    // guards stderrTail
	stderrTail []string      // the agent's (and bwrap's) last stderr lines, for start-up errors
	draining   chan struct{} // closed by Drain
	drainOne   sync.Once

	mu      sync.Mutex // guards the fields below
	state   State
	pid1fd  int    // pidfd of the sandbox's PID 1 (the agent, from --json-status-fd); -1 when unknown or gone
	cg      Cgroup // the sandbox's cgroup (Spec.Cgroup); nil without one or until made
	held    Held   // a worker's Spec.Hold, until its request takes it or Stop drops it
	nextSeq int
	forks   map[int]chan message // seq → forked/fork_error
	exits   map[int]chan message // seq → exited
	// exitFns are the releases of requests whose result is in, run by
	// readLoop itself when their child's exited arrives (whenExited);
	// exitsDone is set when readLoop has ended, and runs no more.
	exitFns   map[int]*exitWait
	exitsDone bool
	inflight  sync.WaitGroup
}

// Start launches the agent and waits until it is ready. On error nothing is
// left running. The caller owns the returned Process and must Stop it.
func Start(ctx context.Context, spec Spec) (_ *Process, err error) {
	if spec.ReadyTimeout == 0 {
		spec.ReadyTimeout = 60 * time.Second
	}
	if spec.Log == nil {
		spec.Log = slog.Default()
	}
	z := &Process{spec: spec, log: spec.Log, done: make(chan struct{}), draining: make(chan struct{}),
		forks: map[int]chan message{}, exits: map[int]chan message{}, exitFns: map[int]*exitWait{}, pid1fd: -1, childPID: make(chan int, 1), pid1Known: make(chan struct{})}
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	undo = append(undo, z.removeRunDir, z.closeRoot) // safe on a partly made run dir
	if err := z.makeDirs(); err != nil {
		return nil, err
	}

	typ := unix.SOCK_SEQPACKET
	if spec.Mode == ModeWorker {
		typ = unix.SOCK_STREAM
	}
	conn, remote, err := socketPair(typ)
	if err != nil {
		return nil, err
	}
	if typ == unix.SOCK_STREAM {
		z.ctl = &streamChannel{c: conn}
	} else {
		z.ctl = packetChannel{c: conn}
	}
	if err := z.ctl.setPassCred(); err != nil {
		remote.Close()
		conn.Close()
		return nil, fmt.Errorf("setting SO_PASSCRED: %w", err)
	}
	undo = append(undo, func() { conn.Close() })
	statusR, statusW, err := os.Pipe()
	if err != nil {
		remote.Close()
		return nil, err
	}
	var blockR, blockW *os.File
	if spec.Cgroup != nil {
		if blockR, blockW, err = os.Pipe(); err != nil {
			remote.Close()
			statusR.Close()
			statusW.Close()
			return nil, fmt.Errorf("making the sandbox's block pipe: %w", err)
		}
	}
	closeChildEnds := func() {
		remote.Close()
		statusW.Close()
		if blockR != nil {
			blockR.Close()
		}
	}
	z.blockW = blockW
	cmd, err := z.command(remote, statusW, blockR)
	if err != nil {
		closeChildEnds()
		statusR.Close()
		z.closeRelease()
		return nil, err
	}
	outR, errR, err := z.startWithPipes(cmd)
	closeChildEnds()
	nsbox.CloseExtra(cmd)
	if err != nil {
		statusR.Close()
		z.closeRelease()
		return nil, err
	}
	z.cmd = cmd
	undo = append(undo, func() { z.kill() }, z.deleteCgroup)
	go z.wait(outR, errR, statusR)
	if spec.Cgroup != nil {
		if err := z.confine(ctx, blockW); err != nil {
			return nil, err
		}
	}

	t0 := time.Now()
	if err := z.awaitReady(ctx); err != nil {
		return nil, err
	}
	z.ready.Took = time.Since(t0)
	z.mu.Lock()
	err = z.toLocked(StateReady) // stopped already when the agent exited right after ready
	z.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("%w: agent exited right after ready: %w", errdefs.ErrUnavailable, err)
	}
	if spec.Mode == ModeWorker && spec.Hold != nil {
		h, err := spec.Hold(ctx, z.ready.HostPID)
		if err != nil {
			return nil, fmt.Errorf("%w: readying the worker for its request: %w", errdefs.ErrUnavailable, err)
		}
		z.mu.Lock()
		z.held = h
		z.mu.Unlock()
	}
	if spec.Mode == ModeWorker {
		// A worker's first read of its socket (Node's read path, run for
		// the first time) happens on this message, not on go.
		if err := z.ctl.send(message{Type: "warm"}, nil); err != nil {
			return nil, fmt.Errorf("%w: warming the worker: %w", errdefs.ErrUnavailable, err)
		}
	}
	z.watcher = newResultWatcher()
	if spec.Mode != ModeWorker {
		go z.readLoop()
	}
	if spec.Mode == ModeFork && z.ready.ForkSafe {
		if z.pool = newPool(spec.PreFork); z.pool != nil {
			z.dirs = make(chan requestDir, spec.PreFork)
			z.lowerZygotePriority() // before the pool's first fork: every child inherits it
			go z.fill()
		}
	}
	return z, nil
}

// makeDirs makes the run directory (mounting its tmpfs with RunTmpfsMiB):
// req/ (the daemon's), scratch/ with tmp/ and shm/ (the sandbox's /tmp and
// /dev/shm, on a tmpfs of their own, makeScratch) and, with Secrets,
// secrets/. The caller removes it on error (removeRunDir).
func (z *Process) makeDirs() error {
	z.reqRoot = filepath.Join(z.spec.RunDir, "req")
	if err := os.MkdirAll(z.spec.RunDir, 0o711); err != nil {
		return fmt.Errorf("creating run dir: %w", err)
	}
	if z.spec.RunTmpfsMiB > 0 {
		if err := z.mountRunDir(z.spec.RunDir); err != nil {
			return err
		}
	}
	// The run dir is the daemon's; tmp, shm and secrets in it are the
	// sandbox's (reqdir.go): made and chowned by descriptor, never by a path
	// through them.
	run, err := untrusted.OpenDir(z.spec.RunDir)
	if err != nil {
		return fmt.Errorf("opening run dir: %w", err)
	}
	defer run.Close()
	// req: traversable but not listable by the sandbox uid (docs/protocol.md).
	if err := z.mkOwned(run, "req", 0o711, false); err != nil {
		return err
	}
	if z.root, err = run.Sub("req"); err != nil {
		return fmt.Errorf("opening request root: %w", err)
	}
	z.spec.Box.ReqDir = z.reqRoot
	if err := z.makeScratch(run); err != nil {
		return err
	}
	if z.spec.Secrets {
		if err := z.mkOwned(run, "secrets", 0o500, true); err != nil {
			return err
		}
		z.spec.Box.SecretsDir = filepath.Join(z.spec.RunDir, "secrets")
	}
	return nil
}

// makeScratch makes run's scratch/ (the daemon's, mode 0711), mounts its
// own tmpfs on it with RunTmpfsMiB, and makes tmp/ and shm/ in it (0700,
// the sandbox's), bound at /tmp and /dev/shm.
func (z *Process) makeScratch(run *untrusted.Dir) error {
	if err := z.mkOwned(run, scratchDir, 0o711, false); err != nil {
		return err
	}
	host := filepath.Join(z.spec.RunDir, scratchDir)
	if z.spec.RunTmpfsMiB > 0 {
		// A path walk is safe here: the run dir is the daemon's and the
		// sandbox has not started.
		if err := z.mountTmpfs("zygo-scratch", host); err != nil {
			return err
		}
	}
	scratch, err := untrusted.OpenDir(host)
	if err != nil {
		return fmt.Errorf("opening scratch dir: %w", err)
	}
	defer scratch.Close()
	for _, name := range []string{"tmp", "shm"} {
		if err := z.mkOwned(scratch, name, 0o700, true); err != nil {
			return err
		}
	}
	z.spec.Box.TmpDir, z.spec.Box.ShmDir = filepath.Join(host, "tmp"), filepath.Join(host, "shm")
	return nil
}

// mkOwned makes name in dir (an existing one is kept) with perm and, when
// owned is set, chowns it to the sandbox's host uid.
func (z *Process) mkOwned(dir *untrusted.Dir, name string, perm os.FileMode, owned bool) error {
	if err := dir.Mkdir(name, perm); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("creating %s: %w", name, err)
	}
	if uid := int(z.spec.Box.HostUID); owned && uid != 0 {
		if err := dir.Chown(name, uid, uid); err != nil {
			return fmt.Errorf("chowning %s: %w", name, err)
		}
	}
	return nil
}

func (z *Process) command(remote, statusW, blockR *os.File) (*exec.Cmd, error) {
	box := z.spec.Box
	if z.spec.Mode == ModeWorker {
		box.Args = []string{nsbox.AgentDir + "/node/zygo_worker.js", "--code", nsbox.CodeDir, "--handler", z.spec.Handler}
	} else {
		bootstrap := fmt.Sprintf("import sys; sys.path.insert(0, %q); from zygo_agent.__main__ import main; main()",
			nsbox.AgentDir+"/python")
		box.Args = []string{"-I", "-c", bootstrap, "--code", nsbox.CodeDir, "--handler", z.spec.Handler, "--mode", string(z.spec.Mode)}
		for _, p := range z.spec.PythonPath {
			box.Args = append(box.Args, "--path", p)
		}
		if z.spec.MemoryMiB > 0 {
			box.Args = append(box.Args, "--memory-mib", strconv.Itoa(z.spec.MemoryMiB))
		}
		if z.spec.NoHugePages {
			box.Args = append(box.Args, "--no-huge-pages")
		}
	}
	box.Env = append([]string{
		"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "TMPDIR=/tmp", "LANG=C.UTF-8",
		"PYTHONUNBUFFERED=", "PYTHONDONTWRITEBYTECODE=1",
	}, nsbox.ThreadEnv...)
	box.Env = append(box.Env, z.spec.Env...)
	return nsbox.Command(box, nsbox.Files{Control: remote, Status: statusW, Block: blockR})
}

// startWithPipes starts cmd with its stdout and stderr on pipes and returns
// their read ends (owned by the caller).
func (z *Process) startWithPipes(cmd *exec.Cmd) (outR, errR *os.File, err error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = nsbox.Start(cmd, z.spec.Box)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, nil, fmt.Errorf("starting bwrap: %w", err)
	}
	return outR, errR, nil
}

// wait drains the process's output, records the sandbox's PID 1, waits for
// bwrap's exit and closes z.done. bwrap exits after PID 1, and the kernel
// kills the rest of PID 1's namespace with it, so the output pipes normally
// reach end of file at once; a process that still holds them (one stuck in
// the kernel, or anything the namespace kill did not reach) gets outputGrace,
// then the read ends are closed so that Done never waits for the sandbox.
func (z *Process) wait(outR, errR, statusR *os.File) {
	var pumps sync.WaitGroup
	for stream, r := range map[string]*os.File{"stdout": outR, "stderr": errR} {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			z.pumpLines(stream, r)
		}()
	}
	status := make(chan struct{})
	go func() {
		defer close(status)
		z.readStatus(statusR)
	}()
	err := z.cmd.Wait()
	// bwrap is gone, so its blocked child was killed with it (bwrap
	// --die-with-parent): end of file on --block-fd can release nothing.
	z.closeRelease()
	pumped := make(chan struct{})
	go func() { pumps.Wait(); close(pumped) }()
	select {
	case <-pumped:
	case <-time.After(outputGrace):
		z.log.Warn("the sandbox's output pipes are still held open after it exited; no longer reading them", "grace", outputGrace)
	}
	outR.Close() // unblocks a pump still reading (pipes from os.Pipe are pollable)
	errR.Close()
	statusR.Close()
	<-pumped
	<-status
	z.mu.Lock()
	if err == nil {
		err = errors.New("exited with status 0")
	}
	z.exitErr = describeExit(err)
	if z.cg != nil {
		if limit, value := z.cg.Exceeded(); limit != "" {
			z.exitErr = fmt.Errorf("%w (the sandbox exceeded %s: %s)", z.exitErr, limit, value)
		}
	}
	_ = z.toLocked(StateStopped) // legal from every state but stopped, which only wait sets
	if z.pid1fd >= 0 {
		unix.Close(z.pid1fd)
		z.pid1fd = -1
	}
	z.mu.Unlock()
	z.ctl.close()
	z.watcher.close()
	close(z.done)
}

// outputGrace is how long wait keeps reading the sandbox's stdout and stderr
// after bwrap has exited.
const outputGrace = 2 * time.Second

// readStatus reads bwrap's --json-status-fd reports until end of file (or
// until wait closes r). The first child-pid, which bwrap reports before the
// agent runs, is the agent's host pid (pid1: the only sender the control
// socket accepts); it keeps a pidfd of it, checked to be PID 1 of its pid
// namespace, for confine and for killing the sandbox.
func (z *Process) readStatus(r io.Reader) {
	dec := json.NewDecoder(r)
	for {
		var st struct {
			ChildPID int `json:"child-pid"`
		}
		if dec.Decode(&st) != nil {
			return
		}
		if st.ChildPID == 0 {
			continue
		}
		if z.pid1 != 0 {
			continue // only the first report, bwrap's own before the agent runs, names it
		}
		fd, err := openPID1(st.ChildPID)
		if err != nil {
			z.log.Warn("opening the sandbox's PID 1", "pid", st.ChildPID, "err", err)
		}
		z.mu.Lock()
		keep := fd >= 0 && z.pid1fd < 0 && z.state != StateStopped
		if keep {
			z.pid1fd = fd
		} else if fd >= 0 {
			unix.Close(fd)
		}
		z.mu.Unlock()
		z.pid1 = st.ChildPID
		close(z.pid1Known)
		if keep {
			select {
			case z.childPID <- st.ChildPID:
			default:
			}
		}
	}
}

// openPID1 returns a pidfd for host pid, checked (through the pidfd, so a
// recycled pid cannot pass) to be PID 1 of its own pid namespace. The
// caller owns the descriptor.
func openPID1(pid int) (int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, fmt.Errorf("opening pidfd: %w", err)
	}
	info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("reading pidfd info: %w", err)
	}
	for _, line := range strings.Split(string(info), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "NSpid:" && f[len(f)-1] == "1" {
			return fd, nil
		}
	}
	unix.Close(fd)
	return -1, fmt.Errorf("pid %d is not PID 1 of a pid namespace", pid)
}

// pumpLines reads one of the agent process's output pipes to its end. What
// arrives while a request owns the process (a spawned agent or a worker,
// after GO) is that request's: kept bounded like its files (output.go),
// redacted as one text and handed to Output when the pipe ends. The rest is
// the zygote's own, handed to Output line by line as it arrives, within its
// lifetime budget. The pipe is always read to its end, so the sandbox never
// blocks on it; what is over a budget is counted and dropped.
func (z *Process) pumpLines(stream string, r io.Reader) {
	own := &agentLog{stream: stream}
	var owner *outputOwner
	var reqLog *streamLog
	endRequest := func() {
		if owner != nil {
			z.output(owner.id, stream, reqLog.lines(stream, owner.redact))
		}
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if o, _ := z.current.Load().(*outputOwner); o != nil && o != owner {
				z.output("", stream, own.flushPartial())
				endRequest()
				owner, reqLog = o, newStreamLog(o.redact)
			}
			if owner != nil {
				reqLog.Write(buf[:n])
			} else {
				z.output("", stream, own.write(buf[:n]))
			}
		}
		if err != nil {
			break
		}
	}
	z.output("", stream, own.flush())
	endRequest()
}

// output hands lines to Spec.Output and keeps the tail of the zygote's own
// stderr (each line cut at maxTailLine bytes) for start-up errors.
func (z *Process) output(requestID, stream string, lines []string) {
	if len(lines) == 0 {
		return
	}
	if stream == "stderr" && requestID == "" {
		z.tailMu.Lock()
		for _, l := range lines[max(len(lines)-stderrTailLines, 0):] {
			if len(l) > maxTailLine {
				l = strings.ToValidUTF8(l[:maxTailLine], "\uFFFD")
			}
			z.stderrTail = append(z.stderrTail, l)
		}
		if n := len(z.stderrTail); n > stderrTailLines {
			z.stderrTail = slices.Clone(z.stderrTail[n-stderrTailLines:])
		}
		z.tailMu.Unlock()
	}
	if z.spec.Output != nil {
		z.spec.Output(requestID, stream, lines)
	}
}

// stderrTailLines is how many stderr lines a start-up error quotes.
const stderrTailLines = 20

// describeExit turns bwrap's exit into words; bwrap reports a signal N that
// killed the agent as status 128+N.
func describeExit(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			if ws.Signaled() {
				return fmt.Errorf("sandbox killed by signal %s", signalName(int(ws.Signal())))
			}
			if c := ws.ExitStatus(); c > 128 {
				return fmt.Errorf("agent killed by signal %s", signalName(c-128))
			}
			return fmt.Errorf("agent exited with status %d", ws.ExitStatus())
		}
	}
	return err
}

func signalName(n int) string {
	return fmt.Sprintf("%s (%d)", strings.ToUpper(unixSignalName(n)), n)
}

func (z *Process) awaitReady(ctx context.Context) error {
	type res struct {
		m     message
		creds *unix.Ucred
		err   error
	}
	ch := make(chan res, 1)
	go func() {
		m, creds, err := z.ctl.recv()
		ch <- res{m, creds, err}
	}()
	timer := time.NewTimer(z.spec.ReadyTimeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		if r.err != nil {
			<-z.done
			if err := z.limitError(); err != nil {
				return err
			}
			return fmt.Errorf("%w: agent exited before ready: %w%s", errdefs.ErrUnavailable, z.exitErr, z.lastOutput())
		}
		// Only the agent speaks on the control socket. A process the import
		// started and handed the socket to (Node's stdio: [.., 3], Python's
		// pass_fds) could otherwise answer ready first, with its own pid: the
		// supervisor would move it, not the worker, into the request's cgroup.
		select {
		case <-z.pid1Known:
		case <-z.done:
			return fmt.Errorf("%w: agent exited before ready: %w%s", errdefs.ErrUnavailable, z.exitErr, z.lastOutput())
		case <-timer.C:
			return fmt.Errorf("%w: the sandbox did not report its process within %s", errdefs.ErrUnavailable, z.spec.ReadyTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
		if r.creds == nil || int(r.creds.Pid) != z.pid1 {
			sender := 0
			if r.creds != nil {
				sender = int(r.creds.Pid)
			}
			return fmt.Errorf("%w: a process other than the agent (host pid %d, the agent is %d) wrote %q to the agent's control socket before ready: the function's import handed the socket (fd 3) to a process it started, which this runtime refuses",
				errdefs.ErrFailedPrecondition, sender, z.pid1, m0Type(r.m))
		}
		z.mu.Lock()
		z.ready.HostPID = z.pid1 // the agent, PID 1 of the sandbox
		z.mu.Unlock()
		return z.handleFirst(r.m)
	case <-timer.C:
		return fmt.Errorf("%w: agent not ready after %s (import too slow or stuck)", errdefs.ErrDeadlineExceeded, z.spec.ReadyTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// m0Type is m's type for an error message, at most 32 bytes of it.
func m0Type(m message) string {
	if len(m.Type) > 32 {
		return m.Type[:32]
	}
	return m.Type
}

func (z *Process) handleFirst(m message) error {
	switch m.Type {
	case "ready":
		z.mu.Lock()
		z.ready.PID, z.ready.Python, z.ready.OpenSSL, z.ready.Checks = m.PID, m.Python, m.OpenSSL, m.Checks
		z.ready.ForkSafe = m.ForkSafe == nil || *m.ForkSafe
		z.mu.Unlock()
		return nil
	case "import_error":
		ie := &ImportError{}
		if err := json.Unmarshal(m.Error, ie); err != nil || ie.Type == "" {
			ie = &ImportError{Type: "ImportError", Message: string(m.Error)}
		}
		// A fork or an allocation refused by the sandbox's cgroup surfaces
		// as an exception (BlockingIOError, MemoryError): say which limit.
		if limit, value := z.exceeded(); limit != "" {
			ie.Message += fmt.Sprintf(" (import exceeded %s: %s)", limit, value)
		}
		return ie
	default:
		return fmt.Errorf("%w: agent sent %q before ready", errdefs.ErrUnavailable, m.Type)
	}
}

// readLoop dispatches control messages until the socket closes. The
// release of a request that whenExited registered runs here, when its
// child's exited arrives: no goroutine waits for it. A message whose
// sender (SCM_CREDENTIALS) is not the agent, the sandbox's PID 1, is
// dropped: a process the import handed the socket to could otherwise
// forge a child's exited or a fork's outcome.
func (z *Process) readLoop() {
	defer z.endExits()
	forged := 0
	for {
		m, creds, err := z.ctl.recv()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrClosed) && !strings.Contains(err.Error(), "peer closed") {
				z.log.Debug("zygote control socket", "err", err)
			}
			return
		}
		if creds == nil || int(creds.Pid) != z.pid1 {
			if forged++; forged == 1 || forged%1000 == 0 {
				sender := 0
				if creds != nil {
					sender = int(creds.Pid)
				}
				z.log.Warn("dropped a control message not sent by the agent: a process the function's import started holds the agent's control socket",
					"type", m.Type, "sender_host_pid", sender, "agent_host_pid", z.pid1, "dropped", forged)
			}
			continue
		}
		z.mu.Lock()
		var ch chan message
		var w *exitWait
		switch m.Type {
		case "forked", "fork_error":
			ch = z.forks[m.Seq]
			delete(z.forks, m.Seq)
		case "exited":
			ch, w = z.exits[m.Seq], z.exitFns[m.Seq]
			delete(z.exits, m.Seq)
			delete(z.exitFns, m.Seq)
		default:
			z.log.Warn("zygote sent an unknown message", "type", m.Type)
		}
		z.mu.Unlock()
		switch {
		case w != nil:
			w.fire()
		case ch != nil:
			ch <- m
		}
	}
}

// endExits runs, once the zygote is gone, the releases still waiting for
// an exited that will not come (readLoop has ended).
func (z *Process) endExits() {
	z.mu.Lock()
	fns := z.exitFns
	z.exitFns, z.exitsDone = nil, true
	z.mu.Unlock()
	if len(fns) == 0 {
		return
	}
	go func() {
		<-z.done // the sandbox is gone, and every child with it
		for _, w := range fns {
			w.fire()
		}
	}()
}

// SecretsDir returns the host directory bound at /run/secrets, or "" when
// the zygote was started without secrets.
func (z *Process) SecretsDir() string { return z.spec.Box.SecretsDir }

// HostUID returns the host uid the sandbox runs as (0: the daemon's own).
func (z *Process) HostUID() int { return int(z.spec.Box.HostUID) }

// Ready returns the warm-up report.
func (z *Process) Ready() Ready {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.ready
}

// State returns the current state.
func (z *Process) State() State {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.state
}

// Done is closed when the sandbox process has exited.
func (z *Process) Done() <-chan struct{} { return z.done }

// Err says why the process exited; nil while it runs.
func (z *Process) Err() error {
	select {
	case <-z.done:
		return z.exitErr
	default:
		return nil
	}
}

// Drain refuses new requests and waits until in-flight ones finish or ctx
// ends. It does not stop the process; call Stop after.
func (z *Process) Drain(ctx context.Context) error {
	z.mu.Lock()
	if z.state == StateReady {
		_ = z.toLocked(StateDraining)
	}
	z.mu.Unlock()
	z.drainOne.Do(func() { close(z.draining) })
	idle := make(chan struct{})
	go func() { z.inflight.Wait(); close(idle) }()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop asks the agent to exit, kills the sandbox if it has not within
// stopGrace, waits (bounded) for Done, deletes its cgroup (killing
// whatever is left in it) and removes its run directory. It is
// idempotent, holds no lock while it waits, and returns within about
// stopGrace+killWait whatever the sandbox does: killing PID 1 kills its
// whole pid namespace, bwrap is killed too, and wait stops reading output
// pipes that something still holds.
func (z *Process) Stop() {
	if z.spec.Mode != ModeWorker {
		// Asynchronously: an agent that never reads its control socket could
		// leave a send blocked (and sendMu held); wait's close of the socket
		// ends it.
		go func() {
			z.sendMu.Lock()
			defer z.sendMu.Unlock()
			_ = z.ctl.send(message{Type: "stop"}, nil)
		}()
	}
	select {
	case <-z.done:
	case <-time.After(stopGrace):
		z.kill()
		select {
		case <-z.done:
		case <-time.After(killWait):
			z.log.Error("the sandbox did not exit after SIGKILL; giving up waiting for it", "waited", killWait)
		}
	}
	if h := z.takeHeld(); h != nil {
		h.Drop(z.done) // the worker served no request
	}
	z.deleteCgroup()
	z.removeRunDir()
	z.closeRoot()
}

// closeRoot closes the request root (z.root) once nothing uses it: a
// request's removal still in flight then fails with EBADF, and the run
// directory's own removal takes what it left.
func (z *Process) closeRoot() {
	if z.root != nil {
		z.root.Close()
	}
}

// takeHeld returns the worker's Held and forgets it (nil when there is
// none, or it was taken).
func (z *Process) takeHeld() Held {
	z.mu.Lock()
	defer z.mu.Unlock()
	h := z.held
	z.held = nil
	return h
}

// stopGrace is how long Stop lets the agent exit by itself; killWait how
// long it then waits for Done after SIGKILL (bwrap's exit plus outputGrace).
const (
	stopGrace = time.Second
	killWait  = outputGrace + 8*time.Second
)

// closeRelease closes the write end of the sandbox's --block-fd pipe.
func (z *Process) closeRelease() {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.blockW != nil {
		z.blockW.Close()
		z.blockW = nil
	}
}

// kill sends SIGKILL to the sandbox's PID 1 (which makes the kernel kill
// every process of its pid namespace) and to bwrap's process group.
func (z *Process) kill() {
	z.mu.Lock()
	if z.pid1fd >= 0 {
		_ = unix.PidfdSendSignal(z.pid1fd, unix.SIGKILL, nil, 0)
	}
	z.mu.Unlock()
	if z.cmd != nil && z.cmd.Process != nil {
		_ = syscall.Kill(-z.cmd.Process.Pid, syscall.SIGKILL)
		_ = z.cmd.Process.Kill()
	}
}
