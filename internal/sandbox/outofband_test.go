package sandbox

import (
	"context"
	"github.com/zygo-run/zygo/internal/guest"
	"strings"
	"sync"
	"testing"
)

// lyingChannelBackend is the fake backend plus GenerationReader: its
// engine reports what the copies really published, which a hijacked guest
// channel (faked by the reseal below) does not tell the truth about.
type lyingChannelBackend struct {
	*fakeBackend
	mu        sync.Mutex
	published map[string]string // engine id → generation actually in the copy
}

func (b *lyingChannelBackend) ReadGeneration(_ context.Context, id string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.published[id], nil
}

// TestResealVerifiedOutOfBand: a reseal acknowledged over the guest channel
// but not really published in the copy (what an impostor on the channel
// would answer) fails the copy, which is destroyed and never Running.
func TestResealVerifiedOutOfBand(t *testing.T) {
	ctx := context.Background()
	be := &lyingChannelBackend{fakeBackend: newFake(), published: map[string]string{}}
	honest := true
	reseal := func(ctx context.Context, tg ResealTarget) (guest.ResealResult, error) {
		res, err := fakeReseal(ctx, tg)
		be.mu.Lock()
		if honest {
			be.published[tg.Sandbox.EngineID] = tg.Sandbox.Generation
		} else {
			be.published[tg.Sandbox.EngineID] = "the-parent's-generation"
		}
		be.mu.Unlock()
		return res, err
	}
	m := newTestManager(t, be, NewMemRegistry(), reseal)
	src, err := m.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Fork(ctx, src.ID, ForkOptions{N: 2})
	if err != nil || len(res.Children) != 2 || res.Children[0].Err != nil {
		t.Fatalf("honest fork: %v %+v", err, res)
	}
	honest = false
	res, err = m.Fork(ctx, src.ID, ForkOptions{N: 2})
	if err == nil {
		t.Fatalf("a fork whose copies did not really publish their generation succeeded: %+v", res)
	}
	for _, c := range res.Children {
		if c.Err == nil || !strings.Contains(c.Error, "through the engine") {
			t.Errorf("child %+v: want a failure naming the out-of-band check", c)
		}
	}
	recs, _ := m.List(ctx)
	if len(recs) != 3 { // the source and the two honest children
		t.Errorf("%d records after the failed fork, want 3", len(recs))
	}
}
