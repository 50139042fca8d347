package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// Transport carries the channel between the host and one guest agent: how the agent's
// connections reach the host's Client, and how a freshly created guest gets its Boot (the
// first token among it). What travels over a connection (the Noise handshake, then HTTP/2, the
// token checks: Client) is the same on every transport; a transport only moves bytes, and a
// peer that reaches it without the token cannot finish the handshake.
//
// A sandbox engine picks its transport: gVisor binds a host directory into the sandbox
// (UnixTransport); a VM would use a vsock port and hand Boot over at boot (its kernel command
// line or a config drive). Calls on one Transport are made by one goroutine (its engine's
// start or attach step), except for the Listener's.
type Transport interface {
	// Listen returns the listener the guest's connections are accepted from. Its Accept
	// yields each new connection of the guest (one the guest dialled in, or one the transport
	// dialled out to it); Close stops accepting and releases what Listen made.
	Listen() (net.Listener, error)
	// PutBoot hands b to a guest that has not started yet. Only a created guest gets one: a
	// restored copy already holds its image's token.
	PutBoot(b Boot) error
	// DropBoot removes the boot data where the guest could still read it once the guest has
	// authenticated, before it starts any service: it held the first token. Idempotent.
	DropBoot() error
}

// UnixTransport is the transport over a host directory that the engine binds read-only into
// the guest at HostDir: the host listens on Dir/agent.sock (SocketPath inside), which the
// agent dials, and writes Boot to Dir/boot.json (BootPath inside), which the agent reads and
// the host removes after the first authenticated connection.
type UnixTransport struct {
	// Dir is the host directory bound at HostDir. Required; the caller owns it.
	Dir string
	// ShareSocket and ShareBoot, when set, are called on the socket and on the boot file right
	// after they are made (root's, mode 0600 and the socket's default), so that the engine's
	// processes, which may run as another uid, can reach them.
	ShareSocket, ShareBoot func(path string) error
}

var _ Transport = (*UnixTransport)(nil)

// Socket returns the host path of the socket the agent dials.
func (t *UnixTransport) Socket() string { return filepath.Join(t.Dir, filepath.Base(SocketPath)) }

// Boot returns the host path of the boot file.
func (t *UnixTransport) Boot() string { return filepath.Join(t.Dir, filepath.Base(BootPath)) }

// Listen implements Transport: it listens on Socket, replacing a stale socket a process that
// died left there. A path too long for a unix socket is an error wrapping
// errdefs.ErrInvalidArgument.
func (t *UnixTransport) Listen() (net.Listener, error) {
	sock := t.Socket()
	if len(sock) >= len(unix.RawSockaddrUnix{}.Path) {
		return nil, fmt.Errorf("socket path %s is too long for a unix socket; use a shorter StateDir: %w", sock, errdefs.ErrInvalidArgument)
	}
	_ = os.Remove(sock) // a stale one from a process that died
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("listening for the guest: %w", err)
	}
	if t.ShareSocket != nil {
		if err := t.ShareSocket(sock); err != nil { // a re-attach makes a new one
			ln.Close()
			return nil, err
		}
	}
	return ln, nil
}

// PutBoot implements Transport: b is written to Boot, mode 0600, then shared (ShareBoot).
func (t *UnixTransport) PutBoot(b Boot) error {
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return fmt.Errorf("writing boot file: %w", err)
	}
	if err := os.WriteFile(t.Boot(), data, 0o600); err != nil {
		return fmt.Errorf("writing boot file: %w", err)
	}
	if t.ShareBoot != nil {
		return t.ShareBoot(t.Boot())
	}
	return nil
}

// DropBoot implements Transport: it removes Boot; a missing file is no error.
func (t *UnixTransport) DropBoot() error {
	if err := os.Remove(t.Boot()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing boot file: %w", err)
	}
	return nil
}

// Connect starts a Client accepting tr's connections that present token, and removes the boot
// data (tr.DropBoot) at the first one that authenticates. It returns the Client and stop, which
// ends accepting and closes the listener (not the Client: close it after stop); stop is
// idempotent and returns once the accept loop has ended. It returns
// Listen's error, with nothing left running.
func Connect(tr Transport, token string, log *slog.Logger) (c *Client, stop func(), err error) {
	ln, err := tr.Listen()
	if err != nil {
		return nil, nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	c = NewClient(token, log)
	c.OnFirstConnect(func() {
		if err := tr.DropBoot(); err != nil {
			log.Warn("removing the guest's boot data", "err", err)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Serve(ctx, ln); err != nil {
			log.Warn("guest accept loop ended", "err", err)
		}
	}()
	return c, func() {
		cancel()
		ln.Close()
		<-done
	}, nil
}
