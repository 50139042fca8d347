package sandboxtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// NewRegistry returns an empty registry for one case of RunRegistry.
type NewRegistry func(t *testing.T) sandbox.Registry

// RunRegistry is the contract of sandbox.Registry as its doc states it: round trips that keep
// the secret tokens, name uniqueness, checkpoint immutability, oldest-first listings, not-found
// errors, records handed out as values, concurrent writers. Run it against every
// implementation (sandbox.MemRegistry and the SQLite store).
func RunRegistry(t *testing.T, newRegistry NewRegistry) {
	cases := []struct {
		name string
		fn   func(t *testing.T, r sandbox.Registry)
	}{
		{"SandboxRoundTrip", testSandboxRoundTrip},
		{"SandboxReplace", testSandboxReplace},
		{"SandboxNameUnique", testSandboxNameUnique},
		{"SandboxListOrder", testSandboxListOrder},
		{"SandboxNotFound", testSandboxNotFound},
		{"SandboxValues", testSandboxValues},
		{"CheckpointRoundTrip", testCheckpointRoundTrip},
		{"CheckpointImmutable", testCheckpointImmutable},
		{"CheckpointListAndDelete", testCheckpointListDelete},
		{"ConcurrentWriters", testConcurrentWriters},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newRegistry(t)) })
	}
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 6789, time.UTC)

func sampleSandbox(id, name string, created time.Time) sandbox.SandboxRecord {
	svc := []guest.Service{{Name: "web", Argv: []string{"/bin/sh", "-c", "sleep 1000"}, OnFork: guest.OnForkRestart}}
	return sandbox.SandboxRecord{
		ID: id, Name: name, Backend: "fake", EngineID: id + "-abcdef", State: sandbox.Running,
		ParentID: "sb-parent", CheckpointID: "cp-0001", Generation: "00112233445566778899aabbccddeeff",
		Token:    "tok-" + id,
		Options:  sandbox.CreateOptions{Name: name, RootfsDir: "/srv/root", Services: svc, Env: []string{"A=1"}},
		Services: svc, Error: "", CreatedAt: created, UpdatedAt: created.Add(time.Second),
	}
}

func sampleCheckpoint(id string, created time.Time) sandbox.CheckpointRecord {
	return sandbox.CheckpointRecord{
		ID: id, Tag: "base", SandboxID: "sb-1", ParentID: "cp-parent", Backend: "fake",
		Dir: "/images/" + id, SizeBytes: 123456789, Token: "tok-" + id,
		Generation: "ffeeddccbbaa99887766554433221100", Hostname: "sb-1-abcdef",
		Options: sandbox.CreateOptions{Name: "one", Env: []string{"B=2"}}, CreatedAt: created,
		Checksums: map[string]string{"checkpoint.img": "crc32c:0123abcd", "pages.img": "crc32c:ffffffff"},
	}
}

func ctxR(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func equalSandbox(t *testing.T, got, want sandbox.SandboxRecord) {
	t.Helper()
	if !got.CreatedAt.Equal(want.CreatedAt) || !got.UpdatedAt.Equal(want.UpdatedAt) {
		t.Errorf("times: got %v/%v, want %v/%v", got.CreatedAt, got.UpdatedAt, want.CreatedAt, want.UpdatedAt)
	}
	got.CreatedAt, got.UpdatedAt = want.CreatedAt, want.UpdatedAt
	if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
		t.Errorf("sandbox record:\n got %#v\nwant %#v", got, want)
	}
}

func testSandboxRoundTrip(t *testing.T, r sandbox.Registry) {
	ctx := ctxR(t)
	want := sampleSandbox("sb-1", "one", t0)
	if err := r.PutSandbox(ctx, want); err != nil {
		t.Fatalf("PutSandbox: %v", err)
	}
	got, err := r.GetSandbox(ctx, "sb-1")
	if err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	equalSandbox(t, got, want)
	if got.Token != want.Token {
		t.Errorf("token not kept: %q", got.Token)
	}
}

func testSandboxReplace(t *testing.T, r sandbox.Registry) {
	ctx := ctxR(t)
	rec := sampleSandbox("sb-1", "one", t0)
	if err := r.PutSandbox(ctx, rec); err != nil {
		t.Fatal(err)
	}
	rec.State, rec.Error, rec.Generation, rec.Token = sandbox.Failed, "engine died", "0f0f", "tok-new"
	rec.Name = "renamed"
	if err := r.PutSandbox(ctx, rec); err != nil {
		t.Fatalf("replacing: %v", err)
	}
	got, err := r.GetSandbox(ctx, "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	equalSandbox(t, got, rec)
	if all, _ := r.ListSandboxes(ctx); len(all) != 1 {
		t.Errorf("after a replace, %d records", len(all))
	}
	// The old name is free again.
	if err := r.PutSandbox(ctx, sampleSandbox("sb-2", "one", t0)); err != nil {
		t.Errorf("reusing a released name: %v", err)
	}
}

func testSandboxNameUnique(t *testing.T, r sandbox.Registry) {
	ctx := ctxR(t)
	if err := r.PutSandbox(ctx, sampleSandbox("sb-1", "one", t0)); err != nil {
		t.Fatal(err)
	}
	err := r.PutSandbox(ctx, sampleSandbox("sb-2", "one", t0))
	if !errdefs.IsExists(err) {
		t.Fatalf("second sandbox named one: %v, want ErrExists", err)
	}
	if _, err := r.GetSandbox(ctx, "sb-2"); !errdefs.IsNotFound(err) {
		t.Errorf("the refused record was stored: %v", err)
	}
	two := sampleSandbox("sb-2", "two", t0)
	if err := r.PutSandbox(ctx, two); err != nil {
		t.Fatal(err)
	}
	two.Name = "one" // renaming onto a taken name is refused too
	if err := r.PutSandbox(ctx, two); !errdefs.IsExists(err) {
		t.Errorf("renaming onto a taken name: %v, want ErrExists", err)
	}
	if got, _ := r.GetSandbox(ctx, "sb-2"); got.Name != "two" {
		t.Errorf("refused rename changed the record: name %q", got.Name)
	}
}

func testSandboxListOrder(t *testing.T, r sandbox.Registry) {
	ctx := ctxR(t)
	if all, err := r.ListSandboxes(ctx); err != nil || len(all) != 0 {
		t.Fatalf("empty registry lists %v, %v", all, err)
	}
	for _, s := range []struct {
		id string
		at time.Time
	}{{"sb-c", t0.Add(2 * time.Second)}, {"sb-b", t0}, {"sb-a", t0}, {"sb-d", t0.Add(time.Nanosecond)}} {
		if err := r.PutSandbox(ctx, sampleSandbox(s.id, "n-"+s.id, s.at)); err != nil {
			t.Fatal(err)
		}
	}
	all, err := r.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range all {
		ids = append(ids, s.ID)
	}
	if fmt.Sprint(ids) != "[sb-a sb-b sb-d sb-c]" {
		t.Errorf("order %v, want oldest first, ties by id: [sb-a sb-b sb-d sb-c]", ids)
	}
	if all[0].Token == "" {
		t.Errorf("listing drops the token")
	}
}

func testSandboxNotFound(t *testing.T, r sandbox.Registry) {
	ctx := ctxR(t)
	if _, err := r.GetSandbox(ctx, "sb-none"); !errdefs.IsNotFound(err) {
		t.Errorf("GetSandbox unknown: %v", err)
	}
	if err := r.DeleteSandbox(ctx, "sb-none"); !errdefs.IsNotFound(err) {
		t.Errorf("DeleteSandbox unknown: %v", err)
	}
	if err := r.PutSandbox(ctx, sampleSandbox("sb-1", "one", t0)); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteSandbox(ctx, "sb-1"); err != nil {
		t.Fatalf("DeleteSandbox: %v", err)
	}
	if _, err := r.GetSandbox(ctx, "sb-1"); !errdefs.IsNotFound(err) {
		t.Errorf("GetSandbox after delete: %v", err)
	}
	if err := r.DeleteSandbox(ctx, "sb-1"); !errdefs.IsNotFound(err) {
		t.Errorf("second DeleteSandbox: %v", err)
	}
}

func testSandboxValues(t *testing.T, r sandbox.Registry) {
	ctx := ctxR(t)
	rec := sampleSandbox("sb-1", "one", t0)
	if err := r.PutSandbox(ctx, rec); err != nil {
		t.Fatal(err)
	}
	rec.Services[0].Name = "changed-after-put"
	got, _ := r.GetSandbox(ctx, "sb-1")
	if got.Services[0].Name != "web" {
		t.Errorf("the caller's slice changed the stored record: %q", got.Services[0].Name)
	}
	got.Services[0].Name = "changed-after-get"
	again, _ := r.GetSandbox(ctx, "sb-1")
	if again.Services[0].Name != "web" {
		t.Errorf("a returned record aliases the stored one: %q", again.Services[0].Name)
	}
}

func testCheckpointRoundTrip(t *testing.T, r sandbox.Registry) {
	ctx := ctxR(t)
	want := sampleCheckpoint("cp-1", t0)
	if err := r.PutCheckpoint(ctx, want); err != nil {
		t.Fatalf("PutCheckpoint: %v", err)
	}
	got, err := r.GetCheckpoint(ctx, "cp-1")
	if err != nil {
		t.Fatalf("GetCheckpoint: %v", err)
	}
	if !got.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("created_at %v, want %v", got.CreatedAt, want.CreatedAt)
	}
	got.CreatedAt = want.CreatedAt
	if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
		t.Errorf("checkpoint record:\n got %#v\nwant %#v", got, want)
	}
	if _, err := r.GetCheckpoint(ctx, "cp-none"); !errdefs.IsNotFound(err) {
		t.Errorf("GetCheckpoint unknown: %v", err)
	}
}

func testCheckpointImmutable(t *testing.T, r sandbox.Registry) {
	ctx := ctxR(t)
	orig := sampleCheckpoint("cp-1", t0)
	if err := r.PutCheckpoint(ctx, orig); err != nil {
		t.Fatal(err)
	}
	changed := orig
	changed.Tag, changed.SizeBytes, changed.Token = "other", 1, "tok-other"
	if err := r.PutCheckpoint(ctx, changed); !errdefs.IsExists(err) {
		t.Fatalf("second PutCheckpoint of cp-1: %v, want ErrExists", err)
	}
	got, _ := r.GetCheckpoint(ctx, "cp-1")
	if got.Tag != orig.Tag || got.SizeBytes != orig.SizeBytes || got.Token != orig.Token {
		t.Errorf("a refused put changed the checkpoint: %+v", got)
	}
}

func testCheckpointListDelete(t *testing.T, r sandbox.Registry) {
	ctx := ctxR(t)
	if all, err := r.ListCheckpoints(ctx); err != nil || len(all) != 0 {
		t.Fatalf("empty registry lists %v, %v", all, err)
	}
	for _, id := range []string{"cp-b", "cp-a", "cp-c"} {
		at := t0
		if id == "cp-c" {
			at = t0.Add(-time.Hour)
		}
		if err := r.PutCheckpoint(ctx, sampleCheckpoint(id, at)); err != nil {
			t.Fatal(err)
		}
	}
	all, err := r.ListCheckpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range all {
		ids = append(ids, c.ID)
	}
	if fmt.Sprint(ids) != "[cp-c cp-a cp-b]" {
		t.Errorf("order %v, want [cp-c cp-a cp-b]", ids)
	}
	if err := r.DeleteCheckpoint(ctx, "cp-a"); err != nil {
		t.Fatalf("DeleteCheckpoint: %v", err)
	}
	if err := r.DeleteCheckpoint(ctx, "cp-a"); !errdefs.IsNotFound(err) {
		t.Errorf("second DeleteCheckpoint: %v", err)
	}
	if _, err := r.GetCheckpoint(ctx, "cp-a"); !errdefs.IsNotFound(err) {
		t.Errorf("GetCheckpoint after delete: %v", err)
	}
	// The id is free again once deleted.
	if err := r.PutCheckpoint(ctx, sampleCheckpoint("cp-a", t0)); err != nil {
		t.Errorf("PutCheckpoint after delete: %v", err)
	}
}

// testConcurrentWriters is a fork of 16 as the Manager does it: every child's record written
// and moved through its states at once.
func testConcurrentWriters(t *testing.T, r sandbox.Registry) {
	ctx := ctxR(t)
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			rec := sampleSandbox(fmt.Sprintf("sb-%02d", i), fmt.Sprintf("child-%02d", i), t0)
			for _, st := range []sandbox.State{sandbox.Restoring, sandbox.Resealing, sandbox.Running} {
				rec.State = st
				if err := r.PutSandbox(ctx, rec); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	all, err := r.ListSandboxes(ctx)
	if err != nil || len(all) != n {
		t.Fatalf("%d records, %v; want %d", len(all), err, n)
	}
	for _, s := range all {
		if s.State != sandbox.Running {
			t.Errorf("%s is %s", s.ID, s.State)
		}
	}
}
