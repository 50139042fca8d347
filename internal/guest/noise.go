package guest

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/flynn/noise"
)

// The channel is bound to the token with the Noise protocol (https://noiseprotocol.org/noise.html,
// revision 34), pattern NNpsk0 over 25519, ChaChaPoly and SHA-256:
//
//	-> psk, e        the guest's first message; its payload (Hello) is already encrypted
//	<- e, ee         the host's answer (HelloReply); both sides now hold the transport keys
//
// The pre-shared key is derived from the token, which never crosses the wire. A peer without
// the token cannot finish the handshake (the host cannot decrypt its first message; the guest
// cannot decrypt the answer), and a relay between the two that holds no token can neither read
// nor change a byte of what follows: every frame is authenticated, in order (the nonce is a
// counter), and a changed, dropped or replayed frame ends the connection. The ephemeral keys
// make every connection's keys fresh, so a transcript recorded before a reseal is of no use
// after it.

// ErrOldGuest is returned by the host's handshake when the guest speaks protocol 1 (a plaintext
// JSON Hello): an agent from a checkpoint image made by a Zygo older than protocol 2. Such an
// image cannot be restored by this version; re-create the sandbox.
var ErrOldGuest = errors.New("the guest agent speaks channel protocol 1 (its image was made by an older Zygo); this Zygo speaks protocol 2: re-create the sandbox from scratch")

// readOldHello reads the rest of a protocol 1 Hello line (its first two bytes were read) and
// returns ErrOldGuest only when it carries token: the old protocol sent the token in the
// clear, and anything on the socket can send `{"`. A hello without the token is a plain
// rejection, so that an unauthenticated connection never changes what the Client believes
// about its guest (Client.incompatible).
func readOldHello(conn net.Conn, token string) error {
	line, err := bufio.NewReader(io.LimitReader(conn, maxHelloBytes)).ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("reading a protocol 1 hello: %w", err)
	}
	var h struct {
		Token string `json:"token"`
	}
	if json.Unmarshal(append([]byte(`{"`), line...), &h) != nil ||
		subtle.ConstantTimeCompare([]byte(h.Token), []byte(token)) != 1 {
		return errors.New("a plaintext (protocol 1) hello that does not carry the sandbox's token: not its guest")
	}
	return ErrOldGuest
}

// channelPrologue is mixed into the handshake hash: both sides must agree on the protocol.
var channelPrologue = []byte("zygo guest channel v2")

// channelSuite is the Noise cipher suite of the channel.
var channelSuite = noise.NewCipherSuite(noise.DH25519, noise.CipherChaChaPoly, noise.HashSHA256)

// framePlaintextMax is the largest plaintext of one transport frame: a Noise message is at most
// 65535 bytes, of which 16 are the ChaChaPoly tag.
const framePlaintextMax = noise.MaxMsgLen - 16

// channelPSK derives the 32-byte Noise pre-shared key from a token.
func channelPSK(token string) []byte {
	sum := sha256.Sum256(append([]byte("zygo-channel-psk\x00"), token...))
	return sum[:]
}

func newHandshake(token string, initiator bool) (*noise.HandshakeState, error) {
	if token == "" {
		return nil, errors.New("empty channel token")
	}
	return noise.NewHandshakeState(noise.Config{
		CipherSuite:           channelSuite,
		Random:                rand.Reader,
		Pattern:               noise.HandshakeNN,
		Initiator:             initiator,
		Prologue:              channelPrologue,
		PresharedKey:          channelPSK(token),
		PresharedKeyPlacement: 0,
	})
}

// writeFrame writes one length-prefixed frame: 2 bytes big-endian length, then msg.
func writeFrame(w io.Writer, msg []byte) error {
	if len(msg) > noise.MaxMsgLen {
		return fmt.Errorf("frame of %d bytes exceeds %d", len(msg), noise.MaxMsgLen)
	}
	buf := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(buf, uint16(len(msg)))
	copy(buf[2:], msg)
	_, err := w.Write(buf)
	return err
}

// readFrame reads one length-prefixed frame of at most max bytes into a new slice.
func readFrame(r io.Reader, max int) ([]byte, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(hdr[:]))
	if n > max {
		return nil, fmt.Errorf("frame of %d bytes exceeds %d", n, max)
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// initiateChannel runs the guest's side of the handshake on conn: it sends hello (encrypted
// under the token's key) and returns the secured connection and the host's reply payload. On
// error the caller closes conn. The host closes a connection whose first message it cannot
// decrypt, which the guest sees as an error here (usually io.EOF).
func initiateChannel(conn net.Conn, token string, hello []byte) (*secureConn, []byte, error) {
	hs, err := newHandshake(token, true)
	if err != nil {
		return nil, nil, err
	}
	msg, _, _, err := hs.WriteMessage(nil, hello)
	if err != nil {
		return nil, nil, fmt.Errorf("writing handshake: %w", err)
	}
	if err := writeFrame(conn, msg); err != nil {
		return nil, nil, fmt.Errorf("sending handshake: %w", err)
	}
	reply, err := readFrame(conn, maxHelloBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("reading handshake answer: %w", err)
	}
	payload, send, recv, err := hs.ReadMessage(nil, reply)
	if err != nil {
		return nil, nil, fmt.Errorf("host's handshake answer does not authenticate: %w", err)
	}
	if send == nil || recv == nil {
		return nil, nil, errors.New("handshake did not complete")
	}
	return newSecureConn(conn, send, recv), payload, nil
}

// acceptChannel runs the host's side of the handshake on conn: it reads the guest's first
// message (at most maxHelloBytes, within conn's deadline), decrypts its payload with the
// token's key and passes it to check, which returns the reply payload or an error. On success
// it sends the reply and returns the secured connection and the guest's hello payload. When
// the first message does not decrypt (wrong token) or check fails, nothing is sent and the
// caller closes conn: a peer without the token learns nothing from the host.
func acceptChannel(conn net.Conn, token string, check func(hello []byte) ([]byte, error)) (*secureConn, []byte, error) {
	hs, err := newHandshake(token, false)
	if err != nil {
		return nil, nil, err
	}
	var hdr [2]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return nil, nil, fmt.Errorf("reading handshake: %w", err)
	}
	if string(hdr[:]) == `{"` { // protocol 1 opened with a plaintext JSON Hello line
		return nil, nil, readOldHello(conn, token)
	}
	msg, err := readFrame(io.MultiReader(bytes.NewReader(hdr[:]), conn), maxHelloBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("reading handshake: %w", err)
	}
	hello, _, _, err := hs.ReadMessage(nil, msg)
	if err != nil {
		return nil, nil, fmt.Errorf("handshake does not authenticate (wrong token?): %w", err)
	}
	replyPayload, err := check(hello)
	if err != nil {
		return nil, hello, err
	}
	reply, recv, send, err := hs.WriteMessage(nil, replyPayload)
	if err != nil {
		return nil, hello, fmt.Errorf("writing handshake answer: %w", err)
	}
	if err := writeFrame(conn, reply); err != nil {
		return nil, hello, fmt.Errorf("sending handshake answer: %w", err)
	}
	return newSecureConn(conn, send, recv), hello, nil
}

// secureConn is a net.Conn whose bytes travel as Noise transport frames over an inner conn.
// Reads and writes may run concurrently (one reader and one writer at a time each, as HTTP/2
// does); a frame that fails to authenticate makes every later Read fail. Close closes the
// inner conn, which secureConn owns.
type secureConn struct {
	net.Conn // the inner conn: addresses, deadlines, Close

	wmu  sync.Mutex
	send *noise.CipherState

	rmu     sync.Mutex
	recv    *noise.CipherState
	pending []byte // decrypted bytes not yet returned by Read
	rerr    error  // sticky read error
}

func newSecureConn(inner net.Conn, send, recv *noise.CipherState) *secureConn {
	return &secureConn{Conn: inner, send: send, recv: recv}
}

// Read returns decrypted bytes. An inner read error, an oversized or unauthenticated frame
// ends the stream: that error is returned now and by every later call.
func (c *secureConn) Read(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for len(c.pending) == 0 {
		if c.rerr != nil {
			return 0, c.rerr
		}
		frame, err := readFrame(c.Conn, noise.MaxMsgLen)
		if err != nil {
			c.rerr = err
			return 0, err
		}
		plain, err := c.recv.Decrypt(frame[:0], nil, frame)
		if err != nil {
			c.rerr = fmt.Errorf("channel frame failed authentication: %w", err)
			return 0, c.rerr
		}
		c.pending = plain
	}
	n := copy(b, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// Write encrypts b in frames of at most framePlaintextMax bytes and writes them. It returns
// len(b) or the inner write error.
func (c *secureConn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	written := 0
	buf := make([]byte, 2, 2+min(len(b), framePlaintextMax)+16)
	for written < len(b) {
		chunk := b[written:min(len(b), written+framePlaintextMax)]
		out, err := c.send.Encrypt(buf[:2], nil, chunk)
		if err != nil {
			return written, fmt.Errorf("encrypting channel frame: %w", err)
		}
		binary.BigEndian.PutUint16(out, uint16(len(out)-2))
		if _, err := c.Conn.Write(out); err != nil {
			return written, err
		}
		written += len(chunk)
		buf = out[:2]
	}
	return written, nil
}

// SetDeadline and friends pass through to the inner conn.
func (c *secureConn) SetDeadline(t time.Time) error      { return c.Conn.SetDeadline(t) }
func (c *secureConn) SetReadDeadline(t time.Time) error  { return c.Conn.SetReadDeadline(t) }
func (c *secureConn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(t) }
