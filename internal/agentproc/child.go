package agentproc

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// child is one process that will serve exactly one request: a fork of the
// zygote (fork mode), the agent process itself (spawn mode), or a Node
// worker. It exists, has said hello, and waits for GO.
type child struct {
	seq     int
	conn    channel // where GO is sent: the request socket, or a worker's control channel
	ownConn bool    // conn is closed right after GO (request sockets)
	hostPID int
	pidfd   int // owned; closed by release
	exitCh  chan message
	born    time.Time
	kind    ChildKind
	held    Held // Spec.Hold's for this child until its request begins it; nil: none
}

// ChildKind says where a request's process came from.
type ChildKind string

const (
	ChildPreForked ChildKind = "preforked" // an idle child of the zygote's pool
	ChildForked    ChildKind = "forked"    // forked for this request
	ChildSpawned   ChildKind = "spawned"   // a fresh interpreter (spawn mode)
	ChildWorker    ChildKind = "worker"    // a Node worker made ready ahead of time
)

// register reserves a sequence number and the channels its forked and
// exited messages are delivered on.
func (z *Process) register() (seq int, forkCh, exitCh chan message) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.nextSeq++
	seq = z.nextSeq
	forkCh, exitCh = make(chan message, 1), make(chan message, 1)
	z.forks[seq], z.exits[seq] = forkCh, exitCh
	return seq, forkCh, exitCh
}

func (z *Process) unregister(seq int) {
	z.mu.Lock()
	delete(z.forks, seq)
	delete(z.exits, seq)
	z.mu.Unlock()
}

// release closes what the supervisor holds of c and forgets its seq, and
// drops what Spec.Hold readied for it if no request began it. A child that
// never got GO sees its request socket close and exits.
func (z *Process) release(c *child) {
	if c.ownConn && c.conn != nil {
		c.conn.close()
	}
	if c.held != nil {
		c.held.Drop(nil)
		c.held = nil
	}
	if c.pidfd > 0 {
		unix.Close(c.pidfd)
		c.pidfd = -1
	}
	z.unregister(c.seq)
}

// exited reports whether c's process has already exited (its pidfd is
// readable, pidfd_open(2)).
func (c *child) exited() bool {
	fds := []unix.PollFd{{Fd: int32(c.pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// newChild makes a child for one request: from the pre-forked pool when one
// is idle and alive, else a fresh one. On failure res carries why.
func (z *Process) newChild(ctx context.Context, fail func(Failure, string, ...any)) (*child, bool) {
	switch z.spec.Mode {
	case ModeWorker:
		return z.workerChild(fail)
	case ModeFork:
		if c := z.pool.take(z); c != nil {
			c.kind = ChildPreForked
			return c, true
		}
	}
	return z.makeChild(ctx, true, fail)
}

// makeChild asks the agent for a child (fork mode: "fork"; spawn mode:
// "run", the agent itself) with a new request socket, and waits for its
// hello, whose SCM_CREDENTIALS give its host pid. forRequest: a request
// waits for this child (the pool was empty); in fork mode the child is
// then told so (hurry, queued on the socket before the zygote has it), and
// skips the reseed and rehearsal of its pre-warm, which would only delay
// the GO (docs/protocol.md, step 3).
func (z *Process) makeChild(ctx context.Context, forRequest bool, fail func(Failure, string, ...any)) (*child, bool) {
	seq, forkCh, exitCh := z.register()
	c := &child{seq: seq, exitCh: exitCh, ownConn: true, pidfd: -1, born: time.Now(), kind: ChildForked}
	if z.spec.Mode == ModeSpawn {
		c.kind = ChildSpawned
	}
	local, remote, err := requestPair()
	if err != nil {
		z.unregister(seq)
		fail(FailInternal, "%v", err)
		return nil, false
	}
	c.conn = packetChannel{c: local}
	if err := setPassCred(local); err != nil {
		unix.Close(remote)
		z.release(c)
		fail(FailInternal, "setting SO_PASSCRED: %v", err)
		return nil, false
	}
	kind := "fork"
	if z.spec.Mode == ModeSpawn {
		kind = "run"
	} else if forRequest {
		if err := send(local, message{Type: "hurry"}, nil); err != nil {
			unix.Close(remote)
			z.release(c)
			fail(FailInternal, "%v", err)
			return nil, false
		}
	}
	z.sendMu.Lock()
	err = z.ctl.sendFD(message{Type: kind, Seq: seq}, remote)
	z.sendMu.Unlock()
	unix.Close(remote)
	if err != nil {
		z.release(c)
		fail(FailZygote, "zygote unavailable: %v", err)
		return nil, false
	}
	// The child's hello is awaited directly; the zygote's forked is not
	// (one wake-up of this goroutine fewer a child). A fork that failed
	// closes the zygote's copy of the request socket before its fork_error
	// (zygote.py): the hello's read then ends, and fork_error says why.
	pid, pidfd, ok := z.awaitHello(local, func(f Failure, format string, a ...any) {
		if z.spec.Mode == ModeFork && !z.awaitForked(ctx, forkCh, fail) {
			return // the fork failed: fail says so
		}
		fail(f, format, a...)
	})
	if !ok {
		z.release(c)
		return nil, false
	}
	c.hostPID, c.pidfd = pid, pidfd
	return c, true
}

// hold runs Spec.Hold for c, a child about to join the pool (off the
// request path); false (c released) when it failed.
func (z *Process) hold(c *child) bool {
	if z.spec.Hold == nil {
		return true
	}
	h, err := z.spec.Hold(context.Background(), c.hostPID)
	if err != nil {
		z.log.Warn("readying a pre-forked child for its request", "child", c.String(), "err", err)
		z.release(c)
		return false
	}
	c.held = h
	return true
}

// workerChild returns a Node worker as the child: its host pid comes from
// its ready message's credentials, and GO goes on its control channel.
func (z *Process) workerChild(fail func(Failure, string, ...any)) (*child, bool) {
	seq, _, exitCh := z.register()
	pid := z.Ready().HostPID
	if pid == 0 {
		z.unregister(seq)
		fail(FailInternal, "worker's host pid is unknown")
		return nil, false
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		z.unregister(seq)
		fail(FailCrashed, "worker %d vanished: %v", pid, err)
		return nil, false
	}
	return &child{seq: seq, conn: z.ctl, hostPID: pid, pidfd: pidfd, exitCh: exitCh, born: time.Now(), kind: ChildWorker,
		held: z.takeHeld()}, true
}

func (z *Process) awaitForked(ctx context.Context, forkCh chan message, fail func(Failure, string, ...any)) bool {
	select {
	case m := <-forkCh:
		if m.Type == "fork_error" {
			fail(FailZygote, "zygote could not fork: %s", string(m.Error))
			return false
		}
		return true
	case <-z.done:
		fail(FailZygote, "zygote died before forking: %v", z.exitErr)
	case <-ctx.Done():
		fail(FailInternal, "request cancelled: %v", ctx.Err())
	case <-time.After(10 * time.Second):
		fail(FailZygote, "zygote did not fork within 10s")
	}
	return false
}

// awaitHello reads the child's hello, whose SCM_CREDENTIALS give its host
// pid, and opens a pidfd for it (owned by the caller).
func (z *Process) awaitHello(local sockConn, fail func(Failure, string, ...any)) (int, int, bool) {
	_ = local.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer local.SetReadDeadline(time.Time{})
	m, creds, err := recv(local)
	if err != nil || m.Type != "hello" || creds == nil {
		select {
		case <-z.done:
			fail(FailZygote, "zygote died: %v", z.exitErr)
		default:
			fail(FailCrashed, "child did not say hello: %v", err)
		}
		return 0, 0, false
	}
	pidfd, err := unix.PidfdOpen(int(creds.Pid), 0)
	if err != nil {
		fail(FailCrashed, "child %d vanished: %v", creds.Pid, err)
		return 0, 0, false
	}
	return int(creds.Pid), pidfd, true
}

// String describes c for logs.
func (c *child) String() string { return fmt.Sprintf("child seq=%d pid=%d", c.seq, c.hostPID) }

// exitWait is a request's release waiting for its child's exit
// (whenExited): run once, by readLoop when the exit is reported, by
// endExits when the zygote is gone, or by the timer that killed a child
// lingering past the deadline when the exit still is not reported.
type exitWait struct {
	mu    sync.Mutex // guards done; held while the timer kills the child
	done  bool
	f     func()
	timer *time.Timer
}

// fire runs w's release unless it ran already.
func (w *exitWait) fire() {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return
	}
	w.done = true
	w.mu.Unlock()
	w.timer.Stop()
	w.f()
}

// whenExited has release run once c's exit is reported (the zygote's
// exited message; c's result is in, so it is exiting), without a goroutine
// waiting for it: readLoop runs it. A child that lingers past deadline+2s
// is killed through its pidfd, and released 5s later if its exit is still
// not reported, as awaitExit would. Fork mode only (readLoop reports the
// exits).
func (z *Process) whenExited(c *child, deadline time.Time, release func()) {
	w := &exitWait{f: release}
	w.timer = time.AfterFunc(max(time.Until(deadline), 0)+2*time.Second, func() {
		w.mu.Lock()
		if !w.done {
			_ = unix.PidfdSendSignal(c.pidfd, unix.SIGKILL, nil, 0)
		}
		w.mu.Unlock()
		time.AfterFunc(5*time.Second, w.fire)
	})
	z.mu.Lock()
	_, pending := z.exits[c.seq] // readLoop has not taken the exit yet
	if pending && !z.exitsDone {
		z.exitFns[c.seq] = w
		z.mu.Unlock()
		return
	}
	z.mu.Unlock()
	// The exit was reported already (it is on c.exitCh, or about to be), or
	// readLoop has ended: wait for it here.
	go func() {
		select {
		case <-c.exitCh:
		case <-z.done:
		}
		w.fire()
	}()
}
