package sandbox

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
)

// fakeNet is a Networker handing out 10.9.0.N and 02:00:00:00:00:N in turn, and recording
// which endpoints are open.
type fakeNet struct {
	mu       sync.Mutex // guards the fields below
	n        int
	open     map[string]NetIdentity // engine id → identity
	detached map[string]NetIdentity // engine id → identity left in the "kernel" (Detach)
	released bool                   // ReleaseKept was called
}

type fakeEP struct {
	f  *fakeNet
	id string
	NetIdentity
}

func (f *fakeNet) Attach(_ context.Context, engineID string, _ NetworkOptions) (NetEndpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	id := NetIdentity{Address: fmt.Sprintf("10.9.0.%d", f.n), MAC: fmt.Sprintf("02:00:00:00:00:%02x", f.n)}
	f.open[engineID] = id
	return &fakeEP{f: f, id: engineID, NetIdentity: id}, nil
}

// Adopt takes back a detached endpoint of engineID with the held identity.
func (f *fakeNet) Adopt(_ context.Context, engineID string, _ NetworkOptions, held NetIdentity) (NetEndpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.detached[engineID]
	if !ok || id != held {
		return nil, fmt.Errorf("no kept endpoint for %s: %w", held.Address, errdefs.ErrNotFound)
	}
	delete(f.detached, engineID)
	f.open[engineID] = id
	return &fakeEP{f: f, id: engineID, NetIdentity: id}, nil
}

func (f *fakeNet) ReleaseKept(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released, f.detached = true, map[string]NetIdentity{}
	return nil
}

func (e *fakeEP) DialTCP(context.Context, int) (net.Conn, error) {
	return nil, fmt.Errorf("fake endpoint: %w", errdefs.ErrFailedPrecondition)
}

func (e *fakeEP) Detach() {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	if id, ok := e.f.open[e.id]; ok {
		delete(e.f.open, e.id)
		if e.f.detached == nil {
			e.f.detached = map[string]NetIdentity{}
		}
		e.f.detached[e.id] = id
	}
}

func (e *fakeEP) Attachment() *NetAttachment { return &NetAttachment{NetnsPath: "/run/netns/" + e.id} }
func (e *fakeEP) Identity() NetIdentity      { return e.NetIdentity }
func (e *fakeEP) Close(context.Context) error {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	delete(e.f.open, e.id)
	return nil
}

// seesOwn is a ResealFunc whose guest sees the identity the host gave the copy, or, for the
// sandbox names in stale, the image's (the source's) identity.
func seesOwn(src *NetIdentity, stale func(ResealTarget) bool) ResealFunc {
	return func(ctx context.Context, t ResealTarget) (guest.ResealResult, error) {
		res, _ := fakeReseal(ctx, t)
		n := t.Sandbox.Net
		if stale(t) {
			n = src
		}
		res.Interfaces = []guest.Interface{{Name: "eth0", MAC: n.MAC, Addrs: []string{n.Address + "/30"}}}
		return res, nil
	}
}

// TestNetworkIdentityPerCopy: with a Networker, a sandbox defaults to egress; each fork child
// and a rollback gets an endpoint of its own; a copy whose guest still sees the image's
// identity fails closed (never Running) and its endpoint is closed; rm closes the rest.
func TestNetworkIdentityPerCopy(t *testing.T) {
	be, nets := newFake(), &fakeNet{open: map[string]NetIdentity{}}
	var src *NetIdentity
	var mu sync.Mutex
	staleFor := map[string]bool{}
	reseal := func(ctx context.Context, tg ResealTarget) (guest.ResealResult, error) {
		mu.Lock()
		stale := staleFor["all"]
		mu.Unlock()
		return seesOwn(src, func(ResealTarget) bool { return stale })(ctx, tg)
	}
	m, err := NewManager(ManagerConfig{Backend: be, Registry: NewMemRegistry(), ImageDir: t.TempDir(), Reseal: reseal,
		Network: nets})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rec, err := m.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Options.Network.Mode != NetworkEgress || rec.Net == nil {
		t.Fatalf("created with %+v, net %v: want egress by default with an identity", rec.Options.Network, rec.Net)
	}
	src = rec.Net
	res, err := m.Fork(ctx, rec.ID, ForkOptions{N: 3})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{src.Address: true}
	for _, c := range res.Children {
		if c.Err != nil || c.Sandbox.Net == nil || seen[c.Sandbox.Net.Address] {
			t.Fatalf("fork child %+v: want its own address", c)
		}
		seen[c.Sandbox.Net.Address] = true
	}
	rb, err := m.Rollback(ctx, rec.ID, res.Checkpoint.ID)
	if err != nil || rb.Net == nil || seen[rb.Net.Address] {
		t.Fatalf("rollback: %+v %v: want a new address", rb.Net, err)
	}
	if len(nets.open) != 4 { // 3 children and the rollback: the old instance's closed with it
		t.Errorf("open endpoints after the rollback: %v, want 4", nets.open)
	}
	src = rb.Net
	mu.Lock()
	staleFor["all"] = true
	mu.Unlock()
	bad, err := m.Fork(ctx, rec.ID, ForkOptions{N: 1, From: res.Checkpoint.ID})
	if err == nil && (len(bad.Children) != 1 || bad.Children[0].Err == nil) {
		t.Fatalf("a copy seeing the image's identity: %+v, want it failed", bad)
	}
	msg := fmt.Sprint(err)
	if len(bad.Children) == 1 {
		msg = bad.Children[0].Error
	}
	if !strings.Contains(msg, "network identity") {
		t.Errorf("failed copy's error %q does not name the network identity", msg)
	}
	if len(nets.open) != 4 {
		t.Errorf("open endpoints after the failed copy: %v, want 4 (its own closed)", nets.open)
	}
	recs, _ := m.List(ctx)
	for _, r := range recs {
		if err := m.Remove(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
	}
	if len(nets.open) != 0 {
		t.Errorf("open endpoints after rm: %v", nets.open)
	}
}

// TestNetworkBadInput: a malformed or forbidden CIDR, a bad mode, lists without egress, and egress
// on a Manager without a Networker are refused naming the field, before anything is made.
func TestNetworkBadInput(t *testing.T) {
	be := newFake()
	m := newTestManager(t, be, NewMemRegistry(), nil)
	for _, c := range []struct {
		n     NetworkOptions
		field string
		cat   func(error) bool
	}{
		{NetworkOptions{Mode: "bridge"}, "network.mode", errdefs.IsInvalidArgument},
		{NetworkOptions{Allow: []string{"10.0.0.0/8", "10.0.0.0/33"}}, "network.allow[1]", errdefs.IsInvalidArgument},
		{NetworkOptions{Allow: []string{"169.254.169.254/32"}}, "network.allow[0]", errdefs.IsInvalidArgument},
		{NetworkOptions{Allow: []string{"fd00::/8"}}, "network.allow[0]", errdefs.IsInvalidArgument},
		{NetworkOptions{Deny: []string{"x"}}, "network.deny[0]", errdefs.IsInvalidArgument},
		{NetworkOptions{Mode: NetworkNone, Deny: []string{"10.0.0.0/8"}}, "network.allow", errdefs.IsInvalidArgument},
		{NetworkOptions{Mode: NetworkEgress}, "network.mode", errdefs.IsFailedPrecondition},
	} {
		_, err := m.Create(context.Background(), CreateOptions{Network: c.n})
		if !c.cat(err) || !strings.Contains(fmt.Sprint(err), c.field) {
			t.Errorf("create with %+v: %v, want an error naming %s", c.n, err, c.field)
		}
	}
	if be.creates != 0 {
		t.Errorf("%d instances made by refused creates", be.creates)
	}
}

// TestRecoverAdoptsNetworkOrFailsClosed: after a restart, a sandbox whose endpoint survived gets
// it back (its port can be published); one whose endpoint did not is marked Dead with the
// reason, its instance destroyed, and its port refused; what nobody adopted is released.
func TestRecoverAdoptsNetworkOrFailsClosed(t *testing.T) {
	ctx := context.Background()
	be, reg, nets := newFake(), NewMemRegistry(), &fakeNet{open: map[string]NetIdentity{}}
	m, err := NewManager(ManagerConfig{Backend: be, Registry: reg, ImageDir: t.TempDir(), Reseal: fakeReseal, Network: nets})
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := m.Create(ctx, CreateOptions{Name: "kept"})
	lost, _ := m.Create(ctx, CreateOptions{Name: "lost"})
	if err := m.Close(); err != nil { // the daemon stops: the instances and endpoints outlive it
		t.Fatal(err)
	}
	if len(nets.open) != 0 || len(nets.detached) != 2 {
		t.Fatalf("after Close: open %v, detached %v: want both detached", nets.open, nets.detached)
	}
	delete(nets.detached, lost.EngineID) // its veth did not survive

	m2, err := NewManager(ManagerConfig{Backend: be, Registry: reg, ImageDir: m.cfg.ImageDir, Reseal: fakeReseal, Network: nets})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	rep, err := m2.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(rep.Adopted, rep.Dead), fmt.Sprint([]string{kept.ID}, []string{lost.ID}); got != want {
		t.Errorf("Recover = %s, want %s", got, want)
	}
	if _, err := m2.Port(ctx, "kept", 8000); err != nil {
		t.Errorf("publishing a port of the adopted sandbox: %v", err)
	}
	rec, _ := m2.Get(ctx, "lost")
	if rec.State != Dead || !strings.Contains(rec.Error, "network") {
		t.Errorf("sandbox without its endpoint: %s %q, want dead naming its network", rec.State, rec.Error)
	}
	if be.running[lost.EngineID] {
		t.Error("the instance without its endpoint still runs")
	}
	if _, err := m2.Port(ctx, "lost", 8000); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("port of the sandbox without its endpoint: %v, want failed precondition", err)
	}
	if !nets.released {
		t.Error("recovery did not release what nobody adopted")
	}
}
