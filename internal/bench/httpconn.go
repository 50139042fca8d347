package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// invokeConn is the bench's client for warm invokes: one persistent
// HTTP/1.1 connection to the daemon's unix socket, used by one goroutine,
// one request at a time, as IdealConn is for the ideal server. Each request
// is the same preformatted bytes (POST /v1/functions/FN/invoke with the
// event); the answer is parsed by net/http's ReadResponse. It exists so that
// the bench's own client, which shares the 2 cores with what it measures,
// costs less of them: the SDK's client (a Transport with a read and a write
// goroutine per connection and a goroutine per request here) cost 0.3-0.5 ms
// of CPU a request, this one 0.19-0.27 ms, the ideal's line protocol
// 0.11-0.17 ms (BENCHMARKS, twelfth and thirteenth rounds). The daemon sees
// the same requests as from any HTTP/1.1 client; the SDK's Invoke stays
// covered by the e2e tests.
type invokeConn struct {
	conn net.Conn
	r    *bufio.Reader
	req  []byte // the whole request, written once per Do
	fn   string
	body bytes.Buffer // the last answer's body, reused
	ctx  context.Context
	stop func() bool // ends the context's hold on the connection (Close)
}

// dialInvoke connects to the daemon's socket sock for invokes of fn with
// event (a JSON document). The caller owns the connection: Close it. When
// ctx ends the connection is closed: a request in flight on it ends at once,
// and every Do after it fails with ctx's error.
func dialInvoke(ctx context.Context, sock, fn, event string) (*invokeConn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, fmt.Errorf("connecting to the daemon at %s: %w", sock, err)
	}
	req := "POST /v1/functions/" + url.PathEscape(fn) + "/invoke HTTP/1.1\r\nHost: zygo\r\n" +
		"Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(event)) + "\r\n\r\n" + event
	c := &invokeConn{conn: conn, r: bufio.NewReaderSize(conn, 4096), req: []byte(req), fn: fn, ctx: ctx}
	c.stop = context.AfterFunc(ctx, func() { conn.Close() })
	return c, nil
}

// Close closes the connection.
func (c *invokeConn) Close() error {
	c.stop()
	return c.conn.Close()
}

// invokeAnswer is what the bench reads from an answer: the daemon's timed
// steps (Server-Timing) and whether the child was forked for the request
// (X-Zygo-Child).
type invokeAnswer struct {
	Phases []wire.Timing
	Forked bool
}

// doTimeout bounds one request on an invokeConn: a daemon that never
// answers fails the bench instead of hanging it.
const doTimeout = 2 * time.Minute

// Do sends the request and reads the whole answer. An answer other than
// 200, or one that closes the connection, is an error naming the status and
// the body's first bytes.
func (c *invokeConn) Do() (invokeAnswer, error) {
	a, err := c.do()
	if err != nil && c.ctx.Err() != nil {
		err = fmt.Errorf("invoking %s: %w", c.fn, c.ctx.Err()) // what closed the connection
	}
	return a, err
}

func (c *invokeConn) do() (invokeAnswer, error) {
	if err := c.ctx.Err(); err != nil {
		return invokeAnswer{}, err
	}
	if err := c.conn.SetDeadline(time.Now().Add(doTimeout)); err != nil {
		return invokeAnswer{}, err
	}
	if _, err := c.conn.Write(c.req); err != nil {
		return invokeAnswer{}, fmt.Errorf("invoking %s: %w", c.fn, err)
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return invokeAnswer{}, fmt.Errorf("invoking %s: reading the answer: %w", c.fn, err)
	}
	c.body.Reset()
	if _, err := c.body.ReadFrom(resp.Body); err != nil {
		resp.Body.Close()
		return invokeAnswer{}, fmt.Errorf("invoking %s: reading the answer: %w", c.fn, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return invokeAnswer{}, fmt.Errorf("invoking %s: %s: %.300s", c.fn, resp.Status, strings.TrimSpace(c.body.String()))
	}
	if resp.Close {
		return invokeAnswer{}, fmt.Errorf("invoking %s: the daemon closed the connection after its answer", c.fn)
	}
	return invokeAnswer{
		Phases: wire.ParseServerTiming(resp.Header.Get(wire.ServerTimingHeader)),
		Forked: resp.Header.Get(wire.ChildHeader) == "forked",
	}, nil
}

// invokeOn runs n invokes of fn with event over conc connections to sock
// (each connection one goroutine, a request at a time), starting one request
// every gap when gap > 0 (traffic that leaves a pool time to refill; the
// wall time excludes the gaps, as InvokePaced's always has, and includes
// dialling the conc connections). It returns each request's latency, steps
// and forked flag, in the order they started. The first failed request ends
// the series (no request starts after it) and is the error; so does ctx
// ending (the requests in flight are cut off by their connections closing),
// its error joined to the first request's when one failed before.
func invokeOn(ctx context.Context, sock, fn, event string, n, conc int, gap time.Duration) (lat []time.Duration, steps [][]wire.Timing, forked []bool, wall time.Duration, err error) {
	lat, steps, forked = make([]time.Duration, n), make([][]wire.Timing, n), make([]bool, n)
	t0 := time.Now()
	conns := make([]*invokeConn, 0, conc)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range conc {
		c, err := dialInvoke(ctx, sock, fn, event)
		if err != nil {
			return nil, nil, nil, 0, err
		}
		conns = append(conns, c)
	}
	next := make(chan int)
	errs := make(chan error, conc)
	failed := make(chan struct{}) // closed by the first request that fails
	var once sync.Once
	for _, c := range conns {
		go func() {
			var first error
			for i := range next {
				if first != nil {
					continue // drain: the dispatcher must not block
				}
				t := time.Now()
				a, err := c.Do()
				lat[i], steps[i], forked[i] = time.Since(t), a.Phases, a.Forked
				if first = err; err != nil {
					once.Do(func() { close(failed) })
				}
			}
			errs <- first
		}()
	}
dispatch:
	for i := range n {
		if i > 0 && gap > 0 {
			select {
			case <-time.After(gap):
			case <-ctx.Done():
				break dispatch
			case <-failed:
				break dispatch
			}
		}
		select {
		case next <- i:
		case <-ctx.Done():
			break dispatch
		case <-failed:
			break dispatch
		}
	}
	close(next)
	for range conc {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		err = errors.Join(ctx.Err(), err) // a request that failed first stays in the report
	}
	wall = time.Since(t0) - time.Duration(max(n-1, 0))*gap
	return lat, steps, forked, wall, err
}
