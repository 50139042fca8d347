package wire

import (
	"context"
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
	var rt http.RoundTripper = &http.Transport{MaxIdleConnsPerHost: 64}
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
