package api

import (
	"testing"

	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// The prefix the packages behind the edge know is the contract's.
func TestAccessTokenPrefix(t *testing.T) {
	if sandbox.AccessTokenPrefix != wire.SandboxAccessTokenPrefix {
		t.Fatalf("sandbox.AccessTokenPrefix %q, wire.SandboxAccessTokenPrefix %q", sandbox.AccessTokenPrefix, wire.SandboxAccessTokenPrefix)
	}
}

// Every route a sandbox access token reaches is a route of the table, with a sandbox {id}: a
// renamed route is not left reachable by a stale entry, nor a typo silently unreachable.
func TestSandboxScopedRoutesExist(t *testing.T) {
	routes := map[string]bool{}
	for _, r := range Routes() {
		routes[r.String()] = true
	}
	for r := range sandboxScopedRoutes {
		if !routes[r] {
			t.Errorf("sandboxScopedRoutes lists %q, which is no route", r)
		}
	}
}
