package controller

// Regression tests of attack-k's findings (a hostile tenant against the controller): node
// secret and function names that collide across namespaces, OCI manifests that exhaust the
// controller's memory, sources that reach internal addresses and reflect their answers, and
// the route's review flood.

import (
	"net/netip"
)

// allowLoopback is the source policy of unit tests whose registries and URL servers are
// httptest servers on loopback, which the default policy refuses.
var allowLoopback = &SourcePolicy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}

// loopbackFetchClient fetches sources from loopback test servers.
var loopbackFetchClient = newFetchClient(fetchHeaderTimeout, allowLoopback)
