package sandbox

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// portKey names one published port: a sandbox (by id, stable across rollback) and a TCP port
// inside it.
type portKey struct {
	sandboxID string
	port      int
}

// portProxy is a loopback listener of the host whose every connection the daemon carries to
// the port inside the sandbox's current instance (the one the record names at accept time:
// after a rollback, the new instance's), dialled through the network endpoint the Manager
// holds for that instance (NetEndpoint.DialTCP: its own host-side veth), never by address
// through the host's routes: an instance without a live endpoint gets no connection. The host
// opening the connection is what the network filter lets in (internal/network): nothing
// outside may open one to a sandbox.
type portProxy struct {
	ln     net.Listener
	ctx    context.Context // ends its connections; from the Manager's
	cancel context.CancelFunc
	done   chan struct{} // closed once the accept loop and every connection ended
}

// MaxPorts bounds the ports one sandbox may have published at once: each is a listener (an fd
// and an ephemeral port of the host's loopback) of the daemon.
const MaxPorts = 32

// portDialTimeout bounds the proxy's connection into the sandbox.
const portDialTimeout = 5 * time.Second

// Port publishes TCP port (1-65535) of a sandbox with network on a loopback address of the
// host and returns it ("127.0.0.1:PORT"); asking again returns the same. The listener lives
// until the sandbox is removed or the Manager closed; a fork child's ports are its own. A
// sandbox publishes at most MaxPorts ports: one more is errdefs.ErrFailedPrecondition naming
// the bound, whoever asks (the API's token or the sandbox's access token).
// Errors: errdefs.ErrInvalidArgument for a bad port, errdefs.ErrFailedPrecondition for a
// sandbox without network or whose instance has no live endpoint on this daemon (dead, not
// running), ErrRecovering while it is being adopted, errdefs.ErrNotFound for an unknown
// sandbox.
func (m *Manager) Port(ctx context.Context, idOrName string, port int) (string, error) {
	if port < 1 || port > 65535 {
		return "", invalid("port", "%d: want 1 to 65535", port)
	}
	rec, err := m.get(ctx, idOrName)
	if err != nil {
		return "", err
	}
	if rec.Options.Network.Mode != NetworkEgress || rec.Net == nil {
		return "", fmt.Errorf("sandbox %s has no network (created with network mode %q): %w",
			rec.ID, rec.Options.Network.Mode, errdefs.ErrFailedPrecondition)
	}
	if m.isRecovering(rec.ID) {
		return "", fmt.Errorf("sandbox %s is %w", rec.ID, ErrRecovering)
	}
	if m.liveNet(rec.EngineID) == nil {
		return "", fmt.Errorf("sandbox %s (%s) has no live network endpoint on this daemon%s: %w",
			rec.ID, rec.State, errorSuffix(rec.Error), errdefs.ErrFailedPrecondition)
	}
	key := portKey{rec.ID, port}
	m.portMu.Lock()
	defer m.portMu.Unlock()
	if m.ctx.Err() != nil {
		return "", fmt.Errorf("publishing port %d of %s: %w", port, rec.ID, errClosed)
	}
	if p := m.ports[key]; p != nil {
		return p.ln.Addr().String(), nil
	}
	if n := m.portCountLocked(rec.ID); n >= MaxPorts {
		return "", fmt.Errorf("port: sandbox %s already publishes %d ports, the most a sandbox may (%d): free one with "+
			"DELETE /v1/sandboxes/%s/ports/PORT (zygo sandbox port --close ID PORT); all are freed when the sandbox is removed: %w",
			rec.ID, n, MaxPorts, rec.ID, errdefs.ErrFailedPrecondition)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listening for port %d of %s: %w", port, rec.ID, err)
	}
	p := &portProxy{ln: ln, done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(m.ctx)
	m.ports[key] = p
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.servePort(p, key)
	}()
	return ln.Addr().String(), nil
}

// Unpublish closes the published port of a sandbox (its listener and the connections it
// carries), freeing its place under MaxPorts. Errors: errdefs.ErrInvalidArgument for a bad
// port, errdefs.ErrNotFound for an unknown sandbox or a port it does not publish.
func (m *Manager) Unpublish(ctx context.Context, idOrName string, port int) error {
	if port < 1 || port > 65535 {
		return invalid("port", "%d: want 1 to 65535", port)
	}
	rec, err := m.get(ctx, idOrName)
	if err != nil {
		return err
	}
	key := portKey{rec.ID, port}
	m.portMu.Lock()
	p := m.ports[key]
	delete(m.ports, key)
	m.portMu.Unlock()
	if p == nil {
		return fmt.Errorf("published port %d of sandbox %s: %w", port, rec.ID, errdefs.ErrNotFound) // reads "published port … not found"
	}
	p.cancel()
	_ = p.ln.Close()
	<-p.done
	return nil
}

// portCountLocked is how many ports sandbox id publishes; portMu held.
func (m *Manager) portCountLocked(id string) int {
	n := 0
	for k := range m.ports {
		if k.sandboxID == id {
			n++
		}
	}
	return n
}

// servePort accepts on p until it is closed, carrying each connection to key's sandbox.
func (m *Manager) servePort(p *portProxy, key portKey) {
	defer close(p.done)
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			m.carry(p.ctx, c, key)
		}()
	}
}

// carry copies between c and key's port inside its sandbox until either side ends or ctx does.
func (m *Manager) carry(ctx context.Context, c net.Conn, key portKey) {
	defer c.Close()
	rec, err := m.reg.GetSandbox(ctx, key.sandboxID)
	if err != nil || rec.Net == nil || rec.State != Running {
		return
	}
	ep := m.liveNet(rec.EngineID)
	if ep == nil {
		m.log.Info("port proxy: the sandbox's instance has no live network endpoint", "sandbox_id", key.sandboxID, "port", key.port)
		return
	}
	dctx, cancel := context.WithTimeout(ctx, portDialTimeout)
	in, err := ep.DialTCP(dctx, key.port)
	cancel()
	if err != nil {
		m.log.Info("port proxy: dialing into the sandbox", "sandbox_id", key.sandboxID, "port", key.port, "err", err)
		return
	}
	defer in.Close()
	stop := context.AfterFunc(ctx, func() { c.Close(); in.Close() })
	defer stop()
	errc := make(chan error, 2)
	go func() { _, err := io.Copy(in, c); closeWrite(in); errc <- err }()
	go func() { _, err := io.Copy(c, in); closeWrite(c); errc <- err }()
	<-errc
	<-errc
}

// errorSuffix is ": "+msg for a record's error, "" for none.
func errorSuffix(msg string) string {
	if msg == "" {
		return ""
	}
	return ": " + msg
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// closePorts closes the published ports of sandboxID ("" : every sandbox's) and waits for
// their connections to end.
func (m *Manager) closePorts(sandboxID string) {
	m.portMu.Lock()
	var ps []*portProxy
	for k, p := range m.ports {
		if sandboxID == "" || k.sandboxID == sandboxID {
			ps = append(ps, p)
			delete(m.ports, k)
		}
	}
	m.portMu.Unlock()
	for _, p := range ps {
		p.cancel()
		_ = p.ln.Close()
		<-p.done
	}
}
