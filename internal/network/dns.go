package network

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"
)

// DNS forwarding. An endpoint's resolv.conf names its host-side address;
// a forwarder bound there (UDP port 53, the only host port the filter lets
// an endpoint reach) relays each query verbatim to the upstream resolvers
// and the first answer back. The host's resolver is often a loopback stub
// (127.0.0.53) that an endpoint must never reach directly; the forwarder
// runs in the daemon, on the host, so it can. Bounds: queries of 12 to
// maxQuery bytes, answers up to maxAnswer, dnsTimeout per upstream,
// maxInflight queries at once per endpoint (more are dropped; the stub
// resolver retries). TCP DNS is not served.
const (
	maxQuery    = 1232
	maxAnswer   = 4096
	dnsTimeout  = 2 * time.Second
	maxInflight = 32
)

type forwarder struct {
	conn     *net.UDPConn
	upstream []netip.AddrPort
	log      *slog.Logger
	sem      chan struct{}
	wg       sync.WaitGroup
}

func startForwarder(at netip.Addr, upstream []netip.AddrPort, log *slog.Logger) (*forwarder, error) {
	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(at, 53)))
	if err != nil {
		return nil, fmt.Errorf("listening on %s:53: %w", at, err)
	}
	f := &forwarder{conn: conn, upstream: upstream, log: log, sem: make(chan struct{}, maxInflight)}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

func (f *forwarder) serve() {
	defer f.wg.Done()
	buf := make([]byte, maxQuery+1)
	for {
		n, from, err := f.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return // closed
		}
		if n < 12 || n > maxQuery {
			continue
		}
		select {
		case f.sem <- struct{}{}:
		default:
			continue
		}
		q := append([]byte(nil), buf[:n]...)
		f.wg.Add(1)
		go func() {
			defer func() { <-f.sem; f.wg.Done() }()
			if ans := f.ask(q); ans != nil {
				_, _ = f.conn.WriteToUDPAddrPort(ans, from)
			}
		}()
	}
}

// ask returns the first upstream's answer whose ID matches q's, or nil.
func (f *forwarder) ask(q []byte) []byte {
	for _, up := range f.upstream {
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(up))
		if err != nil {
			continue
		}
		_ = c.SetDeadline(time.Now().Add(dnsTimeout))
		ans := make([]byte, maxAnswer)
		n := 0
		if _, err = c.Write(q); err == nil {
			n, err = c.Read(ans)
		}
		c.Close()
		if err == nil && n >= 12 && ans[0] == q[0] && ans[1] == q[1] {
			return ans[:n]
		}
	}
	return nil
}

// close stops the listener and waits for queries in flight (each bounded by
// dnsTimeout per upstream).
func (f *forwarder) close() {
	f.conn.Close()
	f.wg.Wait()
}
