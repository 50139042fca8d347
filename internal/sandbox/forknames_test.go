package sandbox

import (
	"context"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// A fork with names gives each child its name; bad or taken names are refused naming the
// field, before anything (the checkpoint included) is made.
func TestForkNames(t *testing.T) {
	ctx := context.Background()
	be, reg := newFake(), NewMemRegistry()
	m := newTestManager(t, be, reg, nil)
	if _, err := m.Create(ctx, CreateOptions{Name: "src"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, CreateOptions{Name: "taken"}); err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		names []string
		field string
		check func(error) bool
	}{
		{[]string{"a"}, "names", errdefs.IsInvalidArgument},                   // 1 name for n=2
		{[]string{"a", "a b"}, "names[1]", errdefs.IsInvalidArgument},         // not a name
		{[]string{"a", ""}, "names[1]", errdefs.IsInvalidArgument},            // empty
		{[]string{"sb-12345678", "b"}, "names[0]", errdefs.IsInvalidArgument}, // looks like an id
		{[]string{"a", "a"}, "names[1]", errdefs.IsInvalidArgument},           // twice
		{[]string{"a", "taken"}, "names[1]", errdefs.IsExists},                // in use
	}
	for _, c := range refused {
		_, err := m.Fork(ctx, "src", ForkOptions{N: 2, Names: c.names})
		if err == nil || !c.check(err) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Fork names %q = %v; want a refusal naming %s", c.names, err, c.field)
		}
	}
	if cps, _ := reg.ListCheckpoints(ctx); len(cps) != 0 {
		t.Errorf("refused forks left %d checkpoints", len(cps))
	}
	if all, _ := reg.ListSandboxes(ctx); len(all) != 2 {
		t.Errorf("refused forks left %d sandboxes, want the 2 created", len(all))
	}
	res, err := m.Fork(ctx, "src", ForkOptions{N: 2, Names: []string{"kid-a", "kid-b"}})
	if err != nil || len(res.Children) != 2 {
		t.Fatalf("Fork with names = %+v, %v", res, err)
	}
	for i, want := range []string{"kid-a", "kid-b"} {
		if got := res.Children[i].Sandbox.Name; got != want {
			t.Errorf("child %d named %q, want %q", i, got, want)
		}
		if rec, err := m.Get(ctx, want); err != nil || rec.ID != res.Children[i].Sandbox.ID {
			t.Errorf("Get(%q) = %+v, %v; want child %d", want, rec, err, i)
		}
	}
	if _, err := m.Fork(ctx, "src", ForkOptions{N: 1, Names: []string{"kid-b"}}); !errdefs.IsExists(err) {
		t.Errorf("Fork onto a child's name = %v; want exists", err)
	}
	// Restore takes a name too.
	if _, err := m.Restore(ctx, res.Checkpoint.ID, RestoreOptions{Name: "kid-a"}); !errdefs.IsExists(err) || !strings.Contains(err.Error(), "name") {
		t.Errorf("Restore onto a name in use = %v; want exists naming name", err)
	}
	if _, err := m.Restore(ctx, res.Checkpoint.ID, RestoreOptions{Name: "-bad"}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Restore with a bad name = %v; want invalid", err)
	}
	rec, err := m.Restore(ctx, res.Checkpoint.ID, RestoreOptions{Name: "restored-one"})
	if err != nil || rec.Name != "restored-one" {
		t.Errorf("Restore with a name = %+v, %v", rec, err)
	}
}
