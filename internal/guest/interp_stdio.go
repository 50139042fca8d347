package guest

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// The interpreter's fds 1 and 2 are pipes the agent reads, never PID 1's own stdio (a host
// file). What arrives there — os.write(1, …), a subprocess's output, a C library printing —
// is output of the run-code call in progress, as ipykernel captures fds; it counts against the
// call's MaxCodeOutputBytes like sys.stdout does. With no call in progress (between calls, or
// after the caller left), it is read and dropped, so a writer never blocks for long.

// stdioDrainMax bounds what the end of a call reads from each pipe after the code finished,
// in bytes: what the code's processes wrote before it returned is in the pipe by then
// (a pipe holds 64 KiB unless the code grew it), and a background writer cannot hold the
// call's answer back for longer than this takes.
const stdioDrainMax = 1 << 20

// stdioPipe is the agent's read end of one of the interpreter's fds 1 and 2.
type stdioPipe struct {
	stream string   // "stdout" or "stderr"
	f      *os.File // non-blocking read end; owned here, closed by the interpreter's watch
	// mu is held from the moment a chunk is read from f until it is handed over (or dropped),
	// so that the end of a call, holding it, sees all that was read before.
	mu sync.Mutex
}

// newStdioPipes returns the read ends (owned by the caller) and the write ends (for the child,
// to be closed by the caller once it started) of the interpreter's fds 1 and 2.
func newStdioPipes() (pipes []*stdioPipe, childEnds []*os.File, err error) {
	for _, stream := range []string{"stdout", "stderr"} {
		r, w, err := os.Pipe()
		if err != nil {
			for _, p := range pipes {
				p.f.Close()
			}
			for _, f := range childEnds {
				f.Close()
			}
			return nil, nil, err
		}
		pipes = append(pipes, &stdioPipe{stream: stream, f: r})
		childEnds = append(childEnds, w)
	}
	return pipes, childEnds, nil
}

// pumpStdio reads sp until EOF or until it is closed, handing each chunk to the call in
// progress on p (interp.forward).
func (in *interp) pumpStdio(p *interpProc, sp *stdioPipe) {
	sc, err := sp.f.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 32<<10)
	for {
		var n int
		var rerr error
		err := sc.Read(func(fd uintptr) bool {
			sp.mu.Lock()
			defer sp.mu.Unlock()
			for {
				n, rerr = unix.Read(int(fd), buf)
				if rerr != unix.EINTR {
					break
				}
			}
			if rerr == unix.EAGAIN {
				return false // wait until readable
			}
			if n > 0 {
				in.forward(p, sp.stream, buf[:n])
			}
			return true
		})
		if err != nil || rerr != nil || n <= 0 {
			return // closed, failed, or EOF (every writer closed its end)
		}
	}
}

// forward hands data to the call in progress on p, or drops it and counts it in in.dropped.
// The caller holds the stdioPipe's mu.
func (in *interp) forward(p *interpProc, stream string, data []byte) {
	in.mu.Lock()
	w := p.active
	in.mu.Unlock()
	if w != nil && w.deliver(interpEvent{Stream: stream, Data: string(data)}) {
		return
	}
	in.mu.Lock()
	in.dropped += int64(len(data))
	in.mu.Unlock()
}

// endCall ends w's capture of p's fds 1 and 2: whatever is in the pipes now (written before
// the code returned) is handed to w, at most stdioDrainMax bytes of each, then p.active is
// cleared, all while holding both pipes, so no chunk is handed to w afterwards.
func (in *interp) endCall(p *interpProc, w *codeWaiter) {
	for _, sp := range p.stdio {
		sp.mu.Lock()
		defer sp.mu.Unlock()
		in.drain(p, sp)
	}
	in.mu.Lock()
	if p.active == w {
		p.active = nil
	}
	in.mu.Unlock()
}

// drain reads what sp holds now without waiting and hands it on. The caller holds sp.mu.
func (in *interp) drain(p *interpProc, sp *stdioPipe) {
	sc, err := sp.f.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 32<<10)
	_ = sc.Control(func(fd uintptr) {
		for total := 0; total < stdioDrainMax; {
			n, err := unix.Read(int(fd), buf)
			if err == unix.EINTR {
				continue
			}
			if n <= 0 || err != nil {
				return
			}
			total += n
			in.forward(p, sp.stream, buf[:n])
		}
	})
}
