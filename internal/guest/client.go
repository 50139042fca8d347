package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// Limits on connections that have not authenticated yet. Sandbox code can reach the host
// socket, so everything before the token check is bounded: bytes, time and count.
const (
	// helloTimeout bounds how long a new connection may take to present its Hello. The agent
	// writes it right after connecting.
	helloTimeout = 2 * time.Second
	// maxHelloBytes bounds each handshake message, the length prefix excluded (a real one is
	// ~150 bytes).
	maxHelloBytes = 4 << 10
	// maxPendingConns bounds the connections of one Client still in the Hello exchange;
	// further ones are closed at once.
	maxPendingConns = 4
	// rejectLogEvery is how often rejected connections are logged: the first, then a count.
	rejectLogEvery = time.Minute
)

// Client is the host's end of the channel to one guest agent. It accepts the agent's
// connections (Serve), keeps the newest authenticated one, and sends requests over it. Calls
// made while no connection is up wait for one until their ctx ends. Safe for concurrent use.
type Client struct {
	log *slog.Logger
	tr  *http2.Transport

	mu      sync.Mutex // guards the fields below
	token   string
	cc      *http2.ClientConn
	conn    net.Conn
	changed chan struct{} // closed and replaced whenever cc changes or the client closes
	closed  bool
	epoch   uint64 // counts accepted connections; the current one is number epoch

	onFirst func() // called once at the first authenticated connection (guarded by mu)
	// incompatible is set when the guest spoke an older protocol (ErrOldGuest); calls that
	// wait for a connection fail with it at once (guarded by mu).
	incompatible error
	pending      int // connections in the Hello exchange (guarded by mu)
	streams      int // long-lived streams open, at most MaxOpenStreams (guarded by mu)
	rejects      rateLog
}

// rateLog logs the first of a kind of event, then at most once per rejectLogEvery with the
// number of events it held back.
type rateLog struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// warn logs msg now, or counts it when one was logged less than rejectLogEvery ago.
func (r *rateLog) warn(log *slog.Logger, msg string, args ...any) {
	r.mu.Lock()
	now := time.Now()
	if !r.last.IsZero() && now.Sub(r.last) < rejectLogEvery {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	r.mu.Unlock()
	log.Warn(msg, append(args, "suppressed_since_last", n)...)
}

// NewClient returns a Client that accepts connections presenting token.
func NewClient(token string, log *slog.Logger) *Client {
	if log == nil {
		log = slog.Default()
	}
	return &Client{
		log:     log,
		token:   token,
		changed: make(chan struct{}),
		tr:      &http2.Transport{AllowHTTP: true, ReadIdleTimeout: 10 * time.Second, PingTimeout: 5 * time.Second},
	}
}

// SetToken replaces the token: later Hellos and requests must use it.
func (c *Client) SetToken(token string) {
	c.mu.Lock()
	c.token = token
	c.mu.Unlock()
}

// Token returns the current token.
func (c *Client) Token() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.token
}

// Serve accepts agent connections on ln until ctx ends or ln is closed; it returns nil then,
// or the accept error. Serve does not close ln: the caller owns it.
func (c *Client) Serve(ctx context.Context, ln net.Listener) error {
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("accepting guest connection: %w", err)
		}
		if !c.reserve() {
			c.rejects.warn(c.log, "rejecting guest connection", "err", "too many unauthenticated connections")
			conn.Close()
			continue
		}
		go func() {
			defer c.unreserve()
			c.handshake(conn)
		}()
	}
}

// reserve takes one of the maxPendingConns slots for a connection in the Hello exchange.
func (c *Client) reserve() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending >= maxPendingConns {
		return false
	}
	c.pending++
	return true
}

func (c *Client) unreserve() {
	c.mu.Lock()
	c.pending--
	c.mu.Unlock()
}

// handshake authenticates one connection (the Noise handshake keyed by the token, noise.go)
// and makes it current. It closes conn on failure.
func (c *Client) handshake(conn net.Conn) {
	_ = conn.SetDeadline(time.Now().Add(helloTimeout))
	sc, _, err := acceptChannel(conn, c.Token(), func(raw []byte) ([]byte, error) {
		var h Hello
		if err := json.Unmarshal(raw, &h); err != nil {
			return nil, fmt.Errorf("decoding hello: %w", err)
		}
		if h.Proto != ProtocolVersion {
			return nil, fmt.Errorf("guest speaks protocol %d, host %d", h.Proto, ProtocolVersion)
		}
		c.authenticated()
		return json.Marshal(HelloReply{OK: true})
	})
	if err != nil {
		if errors.Is(err, ErrOldGuest) {
			c.mu.Lock()
			if c.incompatible == nil {
				c.incompatible = err
				close(c.changed) // wake waiters: they fail at once instead of timing out
				c.changed = make(chan struct{})
			}
			c.mu.Unlock()
		}
		if errors.Is(err, io.EOF) {
			c.log.Debug("guest connection closed during handshake", "err", err)
		} else {
			c.rejects.warn(c.log, "rejecting guest connection", "err", err)
		}
		conn.Close()
		return
	}
	_ = conn.SetDeadline(time.Time{})
	cc, err := c.tr.NewClientConn(sc)
	if err != nil {
		sc.Close()
		return
	}
	c.setConn(sc, cc)
}

// OnFirstConnect sets fn to be called once, when the first guest connection authenticates and
// before the guest is told so (the guest waits for that answer before it starts services).
// Backends use it to remove the boot file, which holds the first token, before any code but
// PID 1 runs in the sandbox. Call it before Serve.
func (c *Client) OnFirstConnect(fn func()) {
	c.mu.Lock()
	c.onFirst = fn
	c.mu.Unlock()
}

func (c *Client) authenticated() {
	c.mu.Lock()
	fn := c.onFirst
	c.onFirst = nil
	c.mu.Unlock()
	if fn != nil {
		fn()
	}
}

func (c *Client) setConn(conn net.Conn, cc *http2.ClientConn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		conn.Close()
		return
	}
	if c.conn != nil {
		c.conn.Close()
	}
	c.conn, c.cc = conn, cc
	c.epoch++
	close(c.changed)
	c.changed = make(chan struct{})
}

// Epoch returns the number of connections accepted so far; the current one, if any, is the
// last of them.
func (c *Client) Epoch() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

// ResetUpTo drops the current connection if it is one of the first epoch accepted, so the next
// call waits for the agent to dial again. Backends call it after a checkpoint, which kills the
// connection inside the guest, with the Epoch read before it: a connection the agent already
// re-dialled is kept.
func (c *Client) ResetUpTo(epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch <= epoch {
		c.dropLocked(c.cc)
	}
}

func (c *Client) dropLocked(cc *http2.ClientConn) {
	if c.cc == nil || c.cc != cc {
		return
	}
	c.conn.Close()
	c.conn, c.cc = nil, nil
	close(c.changed)
	c.changed = make(chan struct{})
}

// ErrClientClosed is the error of every call on a closed Client (its instance destroyed); it
// comes wrapped with errdefs.ErrUnavailable.
var ErrClientClosed = errors.New("guest client closed")

// Close drops the connection and fails every waiting and later call with ErrClientClosed and
// ErrUnavailable.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(c.cc)
	if !c.closed {
		c.closed = true
		close(c.changed)
	}
	return nil
}

// Wait blocks until an authenticated connection is up. It returns ctx's error wrapped in
// ErrUnavailable when ctx ends first.
func (c *Client) Wait(ctx context.Context) error {
	_, err := c.current(ctx)
	return err
}

func (c *Client) current(ctx context.Context) (*http2.ClientConn, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, fmt.Errorf("%w: %w", ErrClientClosed, errdefs.ErrUnavailable)
		}
		cc, ch := c.cc, c.changed
		if cc == nil && c.incompatible != nil {
			err := c.incompatible
			c.mu.Unlock()
			return nil, fmt.Errorf("%w: %w", err, errdefs.ErrFailedPrecondition)
		}
		if cc != nil && !cc.CanTakeNewRequest() {
			c.dropLocked(cc)
			cc, ch = nil, c.changed
		}
		c.mu.Unlock()
		if cc != nil {
			return cc, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for guest agent: %w: %w", ctx.Err(), errdefs.ErrUnavailable)
		}
	}
}

// do sends one request and returns the response; the caller closes its body. Non-2xx answers
// become errors carrying the guest's message and category.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Response, error) {
	cc, err := c.current(ctx)
	if err != nil {
		return nil, err
	}
	u := "http://guest" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token())
	resp, err := cc.RoundTrip(req)
	if err != nil {
		if ctx.Err() == nil {
			c.mu.Lock()
			c.dropLocked(cc)
			c.mu.Unlock()
		}
		return nil, fmt.Errorf("calling guest %s: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

func decodeError(resp *http.Response) error {
	var eb errorBody
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(raw, &eb) != nil || eb.Error == "" {
		eb.Error = fmt.Sprintf("status %d: %s", resp.StatusCode, bytes.TrimSpace(raw))
	}
	var cat error
	switch eb.Code {
	case "not_found":
		cat = errdefs.ErrNotFound
	case "invalid":
		cat = errdefs.ErrInvalidArgument
	case "exists":
		cat = errdefs.ErrExists
	case "too_large":
		cat = errdefs.ErrTooLarge
	case "unauthorized", "conflict":
		cat = errdefs.ErrFailedPrecondition
	case "permission_denied":
		cat = errdefs.ErrPermissionDenied
	default:
		cat = errdefs.ErrUnavailable
	}
	return fmt.Errorf("guest: %w: %w", errors.New(eb.Error), cat) // the agent's text says what; cat is a tag
}

func (c *Client) doJSON(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encoding request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	resp, err := c.do(ctx, method, path, nil, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decoding guest answer to %s: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	return nil
}

// Info probes the agent.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var info Info
	err := c.doJSON(ctx, http.MethodGet, "/v1/info", nil, &info)
	return info, err
}

// Exec runs req.Argv and copies its output to stdout and stderr (either may be nil) as it
// arrives, while it streams req.Stdin (if set) to the command's stdin (see ExecRequest.Stdin).
// It returns the exit status; a program that is missing exits 127 and one that cannot be
// executed 126, as in a shell, with the reason on stderr; a cwd that does not exist is an
// error wrapping ErrNotFound or ErrInvalidArgument. With a Stdin, an agent too old
// to stream it is an error wrapping ErrFailedPrecondition (its command is killed). A read
// error of Stdin abandons the call (the command is killed) and is returned, wrapped.
func (c *Client) Exec(ctx context.Context, req ExecRequest, stdout, stderr io.Writer) (ExitStatus, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	body, err := execBody(req, func(err error) { cancel(&stdinError{err}) })
	if err != nil {
		return ExitStatus{}, err
	}
	ev, err := c.streamBody(ctx, "/v1/exec", body, func(resp *http.Response) error {
		if req.Stdin != nil && resp.Header.Get(stdinHeader) != stdinStreamed {
			return fmt.Errorf("the sandbox's guest agent cannot stream stdin (it predates it: restored "+
				"from a checkpoint of an older zygo?): %w", errdefs.ErrFailedPrecondition)
		}
		return nil
	}, stdout, stderr)
	if se := (*stdinError)(nil); errors.As(context.Cause(ctx), &se) {
		return ExitStatus{}, se
	}
	if err != nil {
		return ExitStatus{}, err
	}
	if ev.Exit == nil {
		return ExitStatus{}, fmt.Errorf("guest exec ended without a status: %w", errdefs.ErrUnavailable)
	}
	return *ev.Exit, nil
}

// RunCode runs Python source in the persistent interpreter, copying what it prints to stdout
// and stderr. A Python exception is a CodeResult with OK false, not an error.
func (c *Client) RunCode(ctx context.Context, req CodeRequest, stdout, stderr io.Writer) (CodeResult, error) {
	ev, err := c.stream(ctx, "/v1/run-code", req, stdout, stderr)
	if err != nil {
		return CodeResult{}, err
	}
	if ev.Result == nil {
		return CodeResult{}, fmt.Errorf("guest run-code ended without a result: %w", errdefs.ErrUnavailable)
	}
	return *ev.Result, nil
}

// stream posts in and copies NDJSON output events until the final one, which it returns.
func (c *Client) stream(ctx context.Context, path string, in any, stdout, stderr io.Writer) (Event, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return Event{}, fmt.Errorf("encoding request: %w", err)
	}
	return c.streamBody(ctx, path, bytes.NewReader(b), nil, stdout, stderr)
}

// streamBody posts body and copies NDJSON output events until the final one, which it
// returns. check, if set, vets the answer's headers before any event is read.
func (c *Client) streamBody(ctx context.Context, path string, body io.Reader, check func(*http.Response) error, stdout, stderr io.Writer) (Event, error) {
	resp, err := c.do(ctx, http.MethodPost, path, nil, body)
	if err != nil {
		return Event{}, err
	}
	defer resp.Body.Close()
	if check != nil {
		if err := check(resp); err != nil {
			return Event{}, err
		}
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev Event
		if err := dec.Decode(&ev); err != nil {
			return Event{}, fmt.Errorf("reading guest stream %s: %w: %w", path, err, errdefs.ErrUnavailable)
		}
		switch {
		case ev.Error != "":
			return Event{}, eventError(ev.Error)
		case ev.Exit != nil || ev.Result != nil:
			return ev, nil
		case ev.Stream == "stdout" && stdout != nil:
			_, _ = stdout.Write(ev.Data)
		case ev.Stream == "stderr" && stderr != nil:
			_, _ = stderr.Write(ev.Data)
		}
	}
}

// eventError maps the agent's start errors to categories: a missing binary or directory is
// ErrNotFound, anything else ErrInvalidArgument.
func eventError(msg string) error {
	if strings.Contains(msg, "not found") || strings.Contains(msg, "no such file") {
		return fmt.Errorf("guest: %w: %w", errors.New(msg), errdefs.ErrNotFound)
	}
	return fmt.Errorf("guest: %w: %w", errors.New(msg), errdefs.ErrInvalidArgument)
}

// PutFile writes r to path in the sandbox with mode perm, creating parent directories.
func (c *Client) PutFile(ctx context.Context, path string, perm uint32, r io.Reader) error {
	return c.PutFileAs(ctx, path, perm, "", r)
}

// PutFileAs is PutFile with the file, and the parent directories it makes, owned by user of
// the sandbox's /etc/passwd ("" is root). An unknown user is an error wrapping
// errdefs.ErrInvalidArgument.
func (c *Client) PutFileAs(ctx context.Context, path string, perm uint32, user string, r io.Reader) error {
	q := url.Values{"path": {path}, "mode": {strconv.FormatUint(uint64(perm), 8)}}
	if user != "" {
		q.Set("user", user)
	}
	resp, err := c.do(ctx, http.MethodPut, "/v1/files", q, r)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// GetFile copies the file at path to w. It returns an error wrapping ErrNotFound when the file
// does not exist.
func (c *Client) GetFile(ctx context.Context, path string, w io.Writer) error {
	return c.GetFileAs(ctx, path, "", w)
}

// GetFileAs is GetFile with the file opened with the credentials of user of the sandbox's
// /etc/passwd ("" is root, as GetFile): a file the user may not read is an error wrapping
// ErrPermission; an unknown user one wrapping ErrInvalidArgument.
func (c *Client) GetFileAs(ctx context.Context, path, user string, w io.Writer) error {
	q := url.Values{"path": {path}}
	if user != "" {
		q.Set("user", user)
	}
	resp, err := c.do(ctx, http.MethodGet, "/v1/files", q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("copying %s: %w", path, err)
	}
	return nil
}

// maxListingBytes bounds the JSON of one listing the host reads: MaxListEntries entries of at
// most a 255-byte name and ~150 bytes of the rest each, with room to spare.
const maxListingBytes = 8 << 20

// ListFiles lists the directory at path (or describes the file there): at most MaxListEntries
// entries in name order, and how many there are.
func (c *Client) ListFiles(ctx context.Context, path string) (Listing, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/files/list", url.Values{"path": {path}}, nil)
	if err != nil {
		return Listing{}, err
	}
	defer resp.Body.Close()
	var out Listing
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxListingBytes)).Decode(&out); err != nil {
		return Listing{}, fmt.Errorf("decoding listing (at most %d bytes): %w", maxListingBytes, err)
	}
	if len(out.Entries) > MaxListEntries {
		return Listing{}, fmt.Errorf("guest listed %d entries, more than %d", len(out.Entries), MaxListEntries)
	}
	return out, nil
}

// WriteSecrets makes secrets the exact contents of /run/secrets (SecretsDir): one file per
// name, mode 0400; other files there are removed. Create uses it; a restored copy gets its
// secrets through Reseal. Its errors name secrets, never values.
func (c *Client) WriteSecrets(ctx context.Context, secrets map[string][]byte) error {
	if err := c.doJSON(ctx, http.MethodPut, "/v1/secrets", SecretsRequest{Secrets: secrets}, nil); err != nil {
		return fmt.Errorf("writing secrets: %w", err)
	}
	return nil
}

// Reseal asks the agent to make this copy independent (see ResealRequest). On success the
// client's token is req.NewToken; on failure it is unchanged and the copy must be destroyed.
func (c *Client) Reseal(ctx context.Context, req ResealRequest) (ResealResult, error) {
	var res ResealResult
	if err := c.doJSON(ctx, http.MethodPost, "/v1/reseal", req, &res); err != nil {
		return res, fmt.Errorf("resealing: %w", err)
	}
	c.SetToken(req.NewToken)
	return res, nil
}
