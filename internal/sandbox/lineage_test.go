package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
)

// A failed create deletes its record (the name is free again) and destroys the half-made
// instance.
func TestCreateFailureLeavesNoRecord(t *testing.T) {
	ctx := context.Background()
	be, reg := newFake(), NewMemRegistry()
	m := newTestManager(t, be, reg, nil)
	be.failCreate = fmt.Errorf("injected create failure: %w", errdefs.ErrUnavailable)
	if _, err := m.Create(ctx, CreateOptions{Name: "x"}); !errdefs.IsUnavailable(err) {
		t.Fatalf("Create = %v, want the injected failure", err)
	}
	if recs, _ := reg.ListSandboxes(ctx); len(recs) != 0 {
		t.Errorf("records left after a failed create: %+v", recs)
	}
	if ids, _ := be.List(ctx); len(ids) != 0 {
		t.Errorf("instances left after a failed create: %v", ids)
	}
	be.failCreate = nil
	if _, err := m.Create(ctx, CreateOptions{Name: "x"}); err != nil {
		t.Errorf("the name is still held after a failed create: %v", err)
	}
}

// A bad rootfs is refused, naming it, before the backend is asked for anything.
func TestCreateValidatesRootfs(t *testing.T) {
	ctx := context.Background()
	be, reg := newFake(), NewMemRegistry()
	m := newTestManager(t, be, reg, nil)
	empty := t.TempDir()
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, []byte("x"), 0o600)
	for _, dir := range []string{"rel/root", "./root", empty, file, "/nonexistent/zygo-root"} {
		_, err := m.Create(ctx, CreateOptions{Name: "r", RootfsDir: dir})
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), dir) {
			t.Errorf("Create rootfs %q = %v, want invalid argument naming it", dir, err)
		}
	}
	if be.creates != 0 {
		t.Errorf("backend Create called %d times for bad rootfs", be.creates)
	}
	if recs, _ := reg.ListSandboxes(ctx); len(recs) != 0 {
		t.Errorf("records left: %+v", recs)
	}
	good := t.TempDir()
	os.Mkdir(filepath.Join(good, "usr"), 0o755)
	if _, err := m.Create(ctx, CreateOptions{Name: "r", RootfsDir: good}); err != nil {
		t.Errorf("Create with a good rootfs: %v", err)
	}
}

// Rollback and fork only take checkpoints of the sandbox's lineage, and a tag resolves among
// the sandbox's own checkpoints first.
func TestCheckpointLineage(t *testing.T) {
	ctx := context.Background()
	be, reg := newFake(), NewMemRegistry()
	m := newTestManager(t, be, reg, nil)
	m4, err := m.Create(ctx, CreateOptions{Name: "m4"})
	if err != nil {
		t.Fatal(err)
	}
	m5, err := m.Create(ctx, CreateOptions{Name: "m5"})
	if err != nil {
		t.Fatal(err)
	}
	cp4, err := m.Checkpoint(ctx, "m4", "dup")
	if err != nil {
		t.Fatal(err)
	}
	cp5, err := m.Checkpoint(ctx, "m5", "dup") // newer: a global tag lookup would pick it
	if err != nil {
		t.Fatal(err)
	}
	refused := func(what string, err error, cp CheckpointRecord, owner string) {
		t.Helper()
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), cp.ID) || !strings.Contains(err.Error(), owner) {
			t.Errorf("%s = %v, want invalid argument naming %s and %s", what, err, cp.ID, owner)
		}
	}
	_, err = m.Rollback(ctx, "m4", cp5.ID)
	refused("rollback m4 --to m5's checkpoint", err, cp5, m5.ID)
	_, err = m.Fork(ctx, "m4", ForkOptions{N: 1, From: cp5.ID})
	refused("fork m4 --from m5's checkpoint", err, cp5, m5.ID)
	if got, _ := m.Get(ctx, "m4"); got.ID != m4.ID || got.CheckpointID != "" || got.State != Running {
		t.Errorf("m4 changed by a refused rollback: %+v", got)
	}

	rb, err := m.Rollback(ctx, "m4", "dup")
	if err != nil || rb.CheckpointID != cp4.ID {
		t.Errorf("rollback m4 --to dup = %s, %v; want m4's own %s", rb.CheckpointID, err, cp4.ID)
	}
	res, err := m.Fork(ctx, "m4", ForkOptions{N: 1, From: "dup"})
	if err != nil || res.Checkpoint.ID != cp4.ID {
		t.Fatalf("fork m4 --from dup = %s, %v; want m4's own %s", res.Checkpoint.ID, err, cp4.ID)
	}
	kid := res.Children[0].Sandbox

	// A child may go back to its ancestor's checkpoints, even once the ancestor is removed;
	// "dup" resolves within its lineage (m4's), never to m5's.
	if err := m.Remove(ctx, "m4"); err != nil {
		t.Fatal(err)
	}
	if rb, err := m.Rollback(ctx, kid.ID, "dup"); err != nil || rb.CheckpointID != cp4.ID {
		t.Errorf("rollback child --to dup = %s, %v; want ancestor's %s", rb.CheckpointID, err, cp4.ID)
	}
	cpk, err := m.Checkpoint(ctx, kid.ID, "kid")
	if err != nil {
		t.Fatal(err)
	}
	// Lineage runs up, not down or sideways.
	_, err = m.Rollback(ctx, "m5", cpk.ID)
	refused("rollback m5 --to the child's checkpoint", err, cpk, kid.ID)
	_, err = m.Rollback(ctx, "m5", "kid")
	refused("rollback m5 --to a tag only the child has", err, cpk, kid.ID)
	if rb, err := m.Rollback(ctx, "m5", "dup"); err != nil || rb.CheckpointID != cp5.ID {
		t.Errorf("rollback m5 --to dup = %s, %v; want %s", rb.CheckpointID, err, cp5.ID)
	}
}

// TestCreateValidatesName: names that would break tables or command lines,
// or shadow an id, are refused before anything is made.
func TestCreateValidatesName(t *testing.T) {
	ctx := context.Background()
	be, reg := newFake(), NewMemRegistry()
	m := newTestManager(t, be, reg, nil)
	for _, bad := range []string{"a b", "../x", "x/y", "-x", "line\nbreak", "sb-123", strings.Repeat("a", 64), "ünï"} {
		if _, err := m.Create(ctx, CreateOptions{Name: bad}); !errdefs.IsInvalidArgument(err) {
			t.Errorf("name %q: err %v, want invalid argument", bad, err)
		}
	}
	if recs, _ := m.List(ctx); len(recs) != 0 {
		t.Fatalf("refused creates left %d records", len(recs))
	}
	for _, good := range []string{"agent", "Agent_2.v1", strings.Repeat("a", 63)} {
		if _, err := m.Create(ctx, CreateOptions{Name: good}); err != nil {
			t.Errorf("name %q: %v", good, err)
		}
	}
}

// TestCreateValidatesServices: an unknown restart or on_fork policy is refused, naming the
// service and the value, before anything is made.
func TestCreateValidatesServices(t *testing.T) {
	ctx := context.Background()
	be, reg := newFake(), NewMemRegistry()
	m := newTestManager(t, be, reg, nil)
	for _, bad := range []guest.Service{
		{Name: "web", Argv: []string{"x"}, Restart: "sometimes"},
		{Name: "web", Argv: []string{"x"}, OnFork: "reboot"},
		{Name: "web"},
	} {
		_, err := m.Create(ctx, CreateOptions{Services: []guest.Service{bad}})
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), `"web"`) {
			t.Errorf("service %+v: err %v, want invalid argument naming it", bad, err)
		}
	}
	if recs, _ := m.List(ctx); len(recs) != 0 {
		t.Fatalf("refused creates left %d records", len(recs))
	}
	if _, err := m.Create(ctx, CreateOptions{Services: []guest.Service{{Name: "web", Argv: []string{"x"}, Restart: guest.RestartAlways}}}); err != nil {
		t.Errorf("a good service: %v", err)
	}
}

// Fork children's names stay within the 63 characters of a name, generation after generation.
func TestChildNamesStayShort(t *testing.T) {
	name := strings.Repeat("n", 63)
	for gen := range 5 {
		id := newID("sb-", 8)
		name = childName(name, id)
		if len(name) > maxNameLen || !strings.HasSuffix(name, "-"+id[3:11]) {
			t.Fatalf("generation %d: child name %q (%d characters)", gen, name, len(name))
		}
	}
	if got := childName("short", "sb-0123456789abcdef"); got != "short-01234567" {
		t.Errorf("childName(short) = %q", got)
	}
}
