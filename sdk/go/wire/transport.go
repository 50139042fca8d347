package wire

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
)

// UnixHTTPClient returns an http.Client whose every connection dials the daemon's unix socket
// at socketPath (the URL's host is ignored: use "http://zygo"). Each connection is checked
// before any byte is sent: on Linux its peer (SO_PEERCRED) must run as root or as this
// process's euid, so a socket another user swapped in (in a state dir they can change)
// receives no call, no secret.
func UnixHTTPClient(socketPath string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", socketPath)
			if err != nil {
				return nil, err
			}
			if err := checkPeer(c, socketPath, os.Geteuid()); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		},
		MaxIdleConnsPerHost: 64,
	}}
}

// TCPHTTPClient returns an http.Client for the daemon's TCP listener (`zygo serve --listen`)
// that sends token as "Authorization: Bearer token" on every request (none when token is "";
// the daemon then answers 401, CodeUnauthenticated).
func TCPHTTPClient(token string) *http.Client {
	return tcpClient(token, &http.Transport{MaxIdleConnsPerHost: 64})
}

// TLSHTTPClient is TCPHTTPClient for a listener serving TLS (`zygo serve --listen ADDR
// --tls-cert F --tls-key F`): URLs are https://, and the daemon's certificate is verified
// against tc's RootCAs (the system's when nil) for tc's ServerName (the URL's host when
// empty). tc nil is the default configuration; the client keeps a clone of tc and never
// modifies the caller's. TLS 1.2 is the least it accepts.
func TLSHTTPClient(token string, tc *tls.Config) *http.Client {
	if tc == nil {
		tc = &tls.Config{}
	}
	tc = tc.Clone()
	if tc.MinVersion < tls.VersionTLS12 {
		tc.MinVersion = tls.VersionTLS12
	}
	return tcpClient(token, &http.Transport{MaxIdleConnsPerHost: 64, TLSClientConfig: tc, ForceAttemptHTTP2: true})
}

func tcpClient(token string, t *http.Transport) *http.Client {
	var rt http.RoundTripper = t
	if token != "" {
		rt = &bearerTransport{token: token, next: rt}
	}
	return &http.Client{Transport: rt}
}

// bearerTransport adds "Authorization: Bearer token" to every request it sends through next.
type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (t *bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context()) // a RoundTripper must not modify the caller's request
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.next.RoundTrip(r)
}
