package daemon

// SandboxNetConfig configures the network of gVisor sandboxes: each engine instance (a
// sandbox, every fork child, every rollback) gets an endpoint of the daemon's one
// internal/network Host (NetworkConfig: the pool, tag and DNS are shared with functions, so
// addresses never overlap and one sweep covers both), its own namespace, veth, address and
// MAC, and runs runsc's own network stack on it.
type SandboxNetConfig struct {
	// Disabled runs every sandbox without network (loopback only); asking for egress is then
	// a failed_precondition. Without the daemon's networking (--no-network, not root) every
	// sandbox runs so too.
	Disabled bool
}
