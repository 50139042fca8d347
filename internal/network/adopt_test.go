package network_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/network"
	"github.com/zygo-run/zygo/internal/network/nettest"
)

// TestAdoptKeepsEndpointAcrossRestart is a daemon restart with a sandbox that outlives it: the
// old Host detaches its endpoint and closes (the veth, namespace and table stay); the new Host,
// told to keep that address, reserves it (and an address whose kernel state is gone) before any
// Attach, sweeps the rest, and Adopt gives the endpoint back its egress and its port dial; what
// nobody adopted is removed by ReleaseKept, and nothing is left at the end.
func TestAdoptKeepsEndpointAcrossRestart(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	th := nettest.NewHost(t)
	cfg := network.Config{Pool: nettest.Pool(), Tag: nettest.Tag(), DNS: []netip.Addr{th.IP}}
	th.RouteFrom(t, cfg.Pool)
	h1, err := network.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	spec := network.EndpointSpec{ID: "old", Egress: true}
	old, err := h1.Attach(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	other, err := h1.Attach(ctx, network.EndpointSpec{ID: "other", Egress: true})
	if err != nil {
		t.Fatal(err)
	}
	oldIP, oldPath, oldIf, oldMAC := old.IP().Addr(), old.NetNSPath(), old.HostIf(), old.MAC().String()
	gone := other.IP().Addr().Next().Next().Next().Next() // recorded, but nothing of it survived
	old.Detach()
	other.Detach()
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(oldIf); err != nil {
		t.Fatalf("the detached endpoint's veth is gone after Close: %v", err)
	}
	if !network.TableExists(t, "zygo"+cfg.Tag) {
		t.Fatal("Close removed the table while a detached endpoint still needs its filter")
	}

	cfg.Keep = []netip.Addr{oldIP, gone}
	h2, err := network.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h2.Close(ctx); err != nil {
			t.Error(err)
		}
		assertNothingLeft(t, cfg)
	}()
	if _, err := netlink.LinkByName(other.HostIf()); err == nil {
		t.Errorf("New kept veth %s of an address not in Keep", other.HostIf())
	}
	for i := range 3 { // the first slots of the pool: the held addresses among them
		ep := attach(t, h2, network.EndpointSpec{ID: "new" + itoa(i), Egress: true})
		if a := ep.IP().Addr(); a == oldIP || a == gone {
			t.Errorf("Attach handed out %s, held by a recorded sandbox", a)
		}
	}
	url := "http://" + th.IP.String() + "/"
	if _, err := nettest.Get(ctx, oldPath, url); err == nil {
		t.Error("a kept endpoint reached the test host before Adopt re-installed its rules")
	}

	ep, err := h2.Adopt(ctx, oldIP, spec)
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if ep.NetNSPath() != oldPath || ep.HostIf() != oldIf || ep.MAC().String() != oldMAC {
		t.Errorf("adopted %s %s %s, want the kept %s %s %s", ep.NetNSPath(), ep.HostIf(), ep.MAC(), oldPath, oldIf, oldMAC)
	}
	if got, err := get(t, ep, url); err != nil || got != th.Body {
		t.Errorf("the adopted endpoint fetching the test host: %q, %v", got, err)
	}
	// DialTCP reaches a server inside the adopted namespace, through its veth.
	var ln net.Listener
	if err := nettest.In(oldPath, func() error {
		var err error
		ln, err = net.Listen("tcp4", net.JoinHostPort(oldIP.String(), "8000"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			_, _ = io.WriteString(c, "inside")
			c.Close()
		}
	}()
	c, err := ep.DialTCP(ctx, 8000)
	if err != nil {
		t.Fatalf("DialTCP into the adopted endpoint: %v", err)
	}
	b, _ := io.ReadAll(c)
	c.Close()
	if string(b) != "inside" {
		t.Errorf("DialTCP read %q, want %q", b, "inside")
	}

	if _, err := h2.Adopt(ctx, oldIP, spec); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("adopting %s twice: %v, want not found", oldIP, err)
	}
	if _, err := h2.Adopt(ctx, gone, spec); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("adopting %s whose veth did not survive: %v, want not found", gone, err)
	}
	if err := h2.ReleaseKept(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ep.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ep.DialTCP(ctx, 8000); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("DialTCP after Close: %v, want failed precondition", err)
	}
}

// TestAdoptFailsClosed: a kept endpoint whose namespace lost its inside interface is not adopted;
// Adopt removes what was kept of it, and a kept endpoint nobody adopts is removed by ReleaseKept.
func TestAdoptFailsClosed(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	th := nettest.NewHost(t)
	h1, cfg := newHost(t, th)
	a, err := h1.Attach(ctx, network.EndpointSpec{ID: "a", Egress: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := h1.Attach(ctx, network.EndpointSpec{ID: "b", Egress: true})
	if err != nil {
		t.Fatal(err)
	}
	a.Detach()
	b.Detach()
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := netlink.LinkByName(a.HostIf())
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkDel(l); err != nil { // its peer inside goes with it
		t.Fatal(err)
	}
	cfg.Keep = []netip.Addr{a.IP().Addr(), b.IP().Addr()}
	h2, err := network.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h2.Adopt(ctx, a.IP().Addr(), network.EndpointSpec{ID: "a", Egress: true}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("adopting an endpoint whose veth is gone: %v, want not found", err)
	}
	if err := h2.ReleaseKept(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(b.HostIf()); err == nil {
		t.Errorf("veth %s left after ReleaseKept", b.HostIf())
	}
	if err := h2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, cfg)
}
