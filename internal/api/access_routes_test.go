package api

import "testing"

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
