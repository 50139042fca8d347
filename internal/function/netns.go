package function

import (
	"context"
	"fmt"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// A function with [network] egress = "allow" has one network endpoint per
// deployment (internal/network): every sandbox of that version (the zygote
// and its forked children, spawned interpreters, Node workers, a restarted
// zygote) starts in its namespace, so they share one address and one
// loopback. A redeploy gets a new endpoint and the old one is closed when
// the old version has stopped; rm, a failed deploy and Shutdown close it.

// checkNetwork fails (errdefs.ErrInvalidArgument, naming the key) when man
// asks for egress from a daemon without networking, or for a range this
// daemon forbids (its pool, its extra forbidden ranges).
func (m *Manager) checkNetwork(man *Manifest) error {
	if man.Network.Egress != EgressAllow {
		return nil
	}
	if m.cfg.Network == nil {
		return fmt.Errorf("%w: zygo.toml: network.egress: this daemon has no networking (it needs root; see `zygo serve --help`)", errdefs.ErrInvalidArgument)
	}
	if err := m.cfg.Network.Validate(man.Network.Endpoint(man.Name)); err != nil {
		return fmt.Errorf("zygo.toml: %w", err)
	}
	return nil
}

// attachNetwork gives d its endpoint unless it has one or needs none. An
// endpoint made while d was being stopped is closed again (errRetired).
func (d *deployment) attachNetwork(ctx context.Context) error {
	if d.manifest.Network.Egress != EgressAllow {
		return nil
	}
	d.mu.Lock()
	has := d.net != nil
	d.mu.Unlock()
	if has {
		return nil
	}
	if d.m.cfg.Network == nil {
		return fmt.Errorf("%w: function %s has network.egress = \"allow\" but this daemon has no networking", errdefs.ErrFailedPrecondition, d.name)
	}
	ep, err := d.m.cfg.Network.Attach(ctx, d.manifest.Network.Endpoint("function:"+d.name))
	if err != nil {
		return fmt.Errorf("attaching the network of %s: %w", d.name, err)
	}
	d.mu.Lock()
	if d.state == StateStopped || d.net != nil {
		d.mu.Unlock()
		_ = ep.Close(context.Background())
		return errRetired
	}
	d.net = ep
	d.mu.Unlock()
	return nil
}

// netNS returns the namespace path and resolv.conf for d's sandboxes, or
// "" for both (a private empty namespace, --unshare-net).
func (d *deployment) netNS() (path, resolv string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.net == nil {
		return "", ""
	}
	return d.net.NetNSPath(), d.net.ResolvConf()
}

// closeNetwork closes d's endpoint, once its sandboxes are stopped.
func (d *deployment) closeNetwork() {
	d.mu.Lock()
	ep := d.net
	d.net = nil
	d.mu.Unlock()
	if ep != nil {
		if err := ep.Close(context.Background()); err != nil {
			d.m.log.Warn("closing the function's network", "function", d.name, "err", err)
		}
	}
}
