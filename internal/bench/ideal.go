package bench

import (
	"bufio"
	"context"
	_ "embed"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// idealScript is the ideal fork-per-request server (ideal.py): the floor a
// warm request is measured against, side by side in the same run.
//
//go:embed ideal.py
var idealScript string

// Ideal is a running ideal server. Stop ends it.
type Ideal struct {
	cmd  *exec.Cmd
	sock string
}

// StartIdeal starts the ideal server with python, serving entry
// ("module:function") from codeDir with pool children forked ahead, on a
// socket in work. It returns once the server is listening.
func StartIdeal(ctx context.Context, python, work, codeDir, entry string, pool int) (*Ideal, error) {
	script := filepath.Join(work, "ideal.py")
	if err := os.WriteFile(script, []byte(idealScript), 0o644); err != nil {
		return nil, err
	}
	sock := filepath.Join(work, "ideal.sock")
	cmd := exec.CommandContext(ctx, python, script, sock, codeDir, entry, fmt.Sprint(pool))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the ideal server: %w", err)
	}
	br := bufio.NewReader(out)
	line, err := br.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("starting the ideal server: said %q: %w", line, err)
	}
	// What the handler prints (Zygo keeps it as the request's logs) is read
	// and dropped, so that the children never block on a full pipe.
	go func() { _, _ = io.Copy(io.Discard, br) }()
	return &Ideal{cmd: cmd, sock: sock}, nil
}

// PID is the ideal server's parent process.
func (s *Ideal) PID() int { return s.cmd.Process.Pid }

// Stop kills the server and waits for it.
func (s *Ideal) Stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// IdealConn is one connection to the ideal server, one request at a time
// (as an HTTP client keeps a connection alive). Close ends it.
type IdealConn struct {
	conn net.Conn
	r    *bufio.Reader
}

// Dial opens a connection to the ideal server.
func (s *Ideal) Dial(ctx context.Context) (*IdealConn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", s.sock)
	if err != nil {
		return nil, err
	}
	return &IdealConn{conn: conn, r: bufio.NewReader(conn)}, nil
}

// Close closes the connection.
func (c *IdealConn) Close() error { return c.conn.Close() }

// Do sends one event (a JSON document without a newline) and returns how
// long the answer took; an answer that is not {"ok": true, ...} is an error.
func (c *IdealConn) Do(event string) (time.Duration, error) {
	t := time.Now()
	if _, err := c.conn.Write([]byte(event + "\n")); err != nil {
		return 0, err
	}
	line, err := c.r.ReadString('\n')
	took := time.Since(t)
	if err == nil && !strings.HasPrefix(line, `{"ok": true`) {
		err = fmt.Errorf("ideal server answered %q", strings.TrimSpace(line))
	}
	return took, err
}

// Invoke runs n requests with conc clients, each on its own connection
// (IdealConn), and returns their latency statistics.
func (s *Ideal) Invoke(ctx context.Context, event string, n, conc int) (Stats, error) {
	lat := make([]time.Duration, 0, n)
	var mu sync.Mutex
	var first error
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	next := make(chan struct{}, n)
	for i := 0; i < n; i++ {
		next <- struct{}{}
	}
	close(next)
	var wg sync.WaitGroup
	t0 := time.Now()
	for c := 0; c < conc; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := s.Dial(ctx)
			if err != nil {
				fail(err)
				return
			}
			defer conn.Close()
			for range next {
				took, err := conn.Do(event)
				if err != nil {
					fail(err)
					return
				}
				mu.Lock()
				lat = append(lat, took)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return Stats{}, fmt.Errorf("invoking the ideal server: %w", first)
	}
	return summarise(lat, time.Since(t0)), nil
}
