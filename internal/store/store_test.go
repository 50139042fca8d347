package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/store"
)

// openStore opens a store at path, closed when the test ends.
func openStore(t *testing.T, path string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func newStore(t *testing.T) *store.Store {
	return openStore(t, filepath.Join(t.TempDir(), "zygo.db"))
}

func putActive(t *testing.T, st *store.Store, fn, hash, manifest string) {
	t.Helper()
	ctx := context.Background()
	if err := st.PutVersion(ctx, store.Version{Function: fn, Hash: hash, Manifest: []byte(manifest)}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetActive(ctx, fn, hash); err != nil {
		t.Fatal(err)
	}
}

// rowCount returns the number of rows of table for function fn.
func rowCount(t *testing.T, st *store.Store, table, fn string) int {
	t.Helper()
	var n int
	if err := st.DB().QueryRow(`SELECT count(*) FROM `+table+` WHERE function = ?`, fn).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPutVersionIsIdempotent(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	putActive(t, st, "hello", "sha256:aa", `{"name":"first"}`)
	first, err := st.Function(ctx, "hello")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // so that a rewritten created_at would differ
	if err := st.PutVersion(ctx, store.Version{Function: "hello", Hash: "sha256:aa", Manifest: []byte(`{"name":"second"}`)}); err != nil {
		t.Fatalf("storing the same version again: %v", err)
	}
	got, err := st.Function(ctx, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Active.Manifest) != `{"name":"first"}` || !got.Active.CreatedAt.Equal(first.Active.CreatedAt) {
		t.Errorf("after a second PutVersion the version is %s created %v, want the first record (%v)",
			got.Active.Manifest, got.Active.CreatedAt, first.Active.CreatedAt)
	}
	if n := rowCount(t, st, "versions", "hello"); n != 1 {
		t.Errorf("%d version rows, want 1", n)
	}
	// The same hash under another function is another version.
	putActive(t, st, "other", "sha256:aa", `{"name":"other"}`)
	if got, err := st.Function(ctx, "other"); err != nil || string(got.Active.Manifest) != `{"name":"other"}` {
		t.Errorf("other = %+v, %v", got, err)
	}
}

func TestSetActiveSwitchesVersion(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	for _, h := range []string{"sha256:01", "sha256:02"} {
		if err := st.PutVersion(ctx, store.Version{Function: "fn", Hash: h, Manifest: []byte(h)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetActive(ctx, "fn", "sha256:01"); err != nil {
		t.Fatal(err)
	}
	v1, err := st.Function(ctx, "fn")
	if err != nil || v1.Active.Hash != "sha256:01" || string(v1.Active.Manifest) != "sha256:01" || v1.Name != "fn" || v1.Active.Function != "fn" {
		t.Fatalf("after activating 01: %+v, %v", v1, err)
	}
	time.Sleep(2 * time.Millisecond)
	if err := st.SetActive(ctx, "fn", "sha256:02"); err != nil {
		t.Fatal(err)
	}
	v2, err := st.Function(ctx, "fn")
	if err != nil || v2.Active.Hash != "sha256:02" || string(v2.Active.Manifest) != "sha256:02" {
		t.Fatalf("after activating 02: %+v, %v", v2, err)
	}
	if !v2.CreatedAt.Equal(v1.CreatedAt) || !v2.UpdatedAt.After(v1.UpdatedAt) {
		t.Errorf("switching kept created_at %v -> %v and moved updated_at %v -> %v; want created kept, updated later",
			v1.CreatedAt, v2.CreatedAt, v1.UpdatedAt, v2.UpdatedAt)
	}
	if n := rowCount(t, st, "versions", "fn"); n != 2 {
		t.Errorf("%d versions kept, want 2 (the old one stays for rollback)", n)
	}
	// Switching back needs no new PutVersion.
	if err := st.SetActive(ctx, "fn", "sha256:01"); err != nil {
		t.Fatal(err)
	}
	if back, _ := st.Function(ctx, "fn"); back.Active.Hash != "sha256:01" {
		t.Errorf("after switching back the active version is %s", back.Active.Hash)
	}
}

func TestFunctionsJoin(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	if fns, err := st.Functions(ctx); err != nil || len(fns) != 0 {
		t.Fatalf("Functions on an empty store = %+v, %v", fns, err)
	}
	for _, n := range []string{"zeta", "alpha", "mid"} {
		putActive(t, st, n, "sha256:old-"+n, "old "+n)
		putActive(t, st, n, "sha256:new-"+n, "new "+n)
	}
	// A function pointing at a version that was never stored has no row to
	// join: neither Function nor Functions returns it.
	if err := st.SetActive(ctx, "ghost", "sha256:never-stored"); err != nil {
		t.Fatal(err)
	}
	fns, err := st.Functions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range fns {
		names = append(names, f.Name)
		if f.Active.Hash != "sha256:new-"+f.Name || string(f.Active.Manifest) != "new "+f.Name || f.Active.Function != f.Name {
			t.Errorf("%s: active %+v, want its new version", f.Name, f.Active)
		}
	}
	if !slices.Equal(names, []string{"alpha", "mid", "zeta"}) {
		t.Errorf("Functions = %q, want [alpha mid zeta]", names)
	}
	for _, n := range []string{"ghost", "nope"} {
		if _, err := st.Function(ctx, n); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Function(%q) = %v, want ErrNotFound", n, err)
		}
	}
}

func logLines(fn, version, req string, n int, at time.Time) []store.LogLine {
	var out []store.LogLine
	for i := range n {
		out = append(out, store.LogLine{Function: fn, Version: version, RequestID: req, Stream: "stdout",
			At: at.Add(time.Duration(i) * time.Millisecond), Line: fmt.Sprintf("%s %s line %d", fn, req, i)})
	}
	return out
}

func TestDeleteFunction(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	putActive(t, st, "gone", "sha256:1", "m1")
	putActive(t, st, "gone", "sha256:2", "m2")
	putActive(t, st, "kept", "sha256:1", "k1")
	now := time.Now()
	if err := st.AppendLogs(ctx, slices.Concat(logLines("gone", "sha256:2", "r1", 3, now), logLines("kept", "sha256:1", "r2", 2, now))); err != nil {
		t.Fatal(err)
	}

	if err := st.DeleteFunction(ctx, "gone"); err != nil {
		t.Fatalf("DeleteFunction: %v", err)
	}
	if _, err := st.Function(ctx, "gone"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Function after delete = %v, want ErrNotFound", err)
	}
	if n := rowCount(t, st, "versions", "gone"); n != 0 {
		t.Errorf("%d versions left after delete", n)
	}
	if n := rowCount(t, st, "logs", "gone"); n != 0 {
		t.Errorf("%d log lines left after delete", n)
	}
	// The other function is untouched.
	if _, err := st.Function(ctx, "kept"); err != nil {
		t.Errorf("Function(kept): %v", err)
	}
	if lines, _ := st.Logs(ctx, store.LogQuery{Function: "kept"}); len(lines) != 2 {
		t.Errorf("kept has %d log lines, want 2", len(lines))
	}
	for _, n := range []string{"gone", "never-existed"} {
		if err := st.DeleteFunction(ctx, n); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("DeleteFunction(%q) = %v, want ErrNotFound", n, err)
		}
	}
}

func TestLogsQuery(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	if err := st.AppendLogs(ctx, nil); err != nil {
		t.Fatalf("AppendLogs(nil): %v", err)
	}
	at := time.UnixMilli(1_700_000_000_123)
	var all []store.LogLine
	for i := range 3 { // interleave two requests and another function
		all = append(all, logLines("f", "v1", "r1", 1, at.Add(time.Duration(i)*time.Second))...)
		all = append(all, logLines("f", "v1", "r2", 1, at.Add(time.Duration(i)*time.Second))...)
		all = append(all, logLines("g", "v9", "r1", 1, at)...)
	}
	all = append(all, store.LogLine{Function: "f", Version: "v1", Stream: "zygo", At: at, Line: "warm-up report"})
	if err := st.AppendLogs(ctx, all); err != nil {
		t.Fatal(err)
	}

	got, err := st.Logs(ctx, store.LogQuery{Function: "f"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 7 {
		t.Fatalf("Logs(f) returned %d lines, want 7: %+v", len(got), got)
	}
	var wantF []store.LogLine
	for _, l := range all {
		if l.Function == "f" {
			wantF = append(wantF, l)
		}
	}
	for i, l := range got {
		w := wantF[i]
		if l.Function != "f" || l.Version != w.Version || l.RequestID != w.RequestID || l.Stream != w.Stream ||
			l.Line != w.Line || !l.At.Equal(w.At) {
			t.Errorf("line %d = %+v, want %+v", i, l, w)
		}
		if i > 0 && l.ID <= got[i-1].ID {
			t.Errorf("ids not increasing: %d after %d", l.ID, got[i-1].ID)
		}
	}

	r2, err := st.Logs(ctx, store.LogQuery{Function: "f", RequestID: "r2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r2) != 3 {
		t.Errorf("request r2 has %d lines, want 3", len(r2))
	}
	for _, l := range r2 {
		if l.RequestID != "r2" || l.Function != "f" {
			t.Errorf("request filter returned %+v", l)
		}
	}

	after, err := st.Logs(ctx, store.LogQuery{Function: "f", AfterID: got[2].ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 4 || after[0].ID != got[3].ID {
		t.Errorf("after id %d: %d lines starting at %d, want 4 starting at %d", got[2].ID, len(after), after[0].ID, got[3].ID)
	}

	limited, err := st.Logs(ctx, store.LogQuery{Function: "f", AfterID: got[1].ID, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(limited) != 2 || limited[0].ID != got[2].ID || limited[1].ID != got[3].ID {
		t.Errorf("limit 2 after %d = %+v, want lines %d and %d (oldest first)", got[1].ID, limited, got[2].ID, got[3].ID)
	}

	if none, err := st.Logs(ctx, store.LogQuery{Function: "f", AfterID: got[6].ID}); err != nil || len(none) != 0 {
		t.Errorf("after the last id: %+v, %v", none, err)
	}
	if none, err := st.Logs(ctx, store.LogQuery{Function: "nobody"}); err != nil || len(none) != 0 {
		t.Errorf("unknown function: %+v, %v", none, err)
	}
}

func TestLogsDefaultLimit(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	if err := st.AppendLogs(ctx, logLines("f", "v", "r", 1001, time.Now())); err != nil {
		t.Fatal(err)
	}
	got, err := st.Logs(ctx, store.LogQuery{Function: "f"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1000 || got[0].Line != "f r line 0" {
		t.Errorf("Logs without a limit returned %d lines starting %q, want the oldest 1000", len(got), got[0].Line)
	}
}

func TestLogsArePruned(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	const extra = 50
	now := time.Now()
	// The limit plus extra lines of f in one call, and a few of g mixed in.
	lines := logLines("f", "v", "r", store.DefaultLogRetentionLines+extra, now)
	lines = slices.Insert(lines, 10, logLines("g", "v", "r", 5, now)...)
	t0 := time.Now()
	if err := st.AppendLogs(ctx, lines); err != nil {
		t.Fatal(err)
	}
	t.Logf("appending %d lines took %v", len(lines), time.Since(t0))

	if n := rowCount(t, st, "logs", "f"); n != store.DefaultLogRetentionLines {
		t.Fatalf("f keeps %d lines, want %d", n, store.DefaultLogRetentionLines)
	}
	if n := rowCount(t, st, "logs", "g"); n != 5 {
		t.Errorf("g keeps %d lines, want its 5 (pruning is per function)", n)
	}
	first, err := st.Logs(ctx, store.LogQuery{Function: "f", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("f r line %d", extra); first[0].Line != want {
		t.Errorf("oldest kept line is %q, want %q (the oldest are pruned)", first[0].Line, want)
	}

	// A later append prunes again, by as many lines as it adds.
	if err := st.AppendLogs(ctx, logLines("f", "v", "later", 3, now)); err != nil {
		t.Fatal(err)
	}
	if n := rowCount(t, st, "logs", "f"); n != store.DefaultLogRetentionLines {
		t.Errorf("after another append f keeps %d lines, want %d", n, store.DefaultLogRetentionLines)
	}
	first, _ = st.Logs(ctx, store.LogQuery{Function: "f", Limit: 1})
	if want := fmt.Sprintf("f r line %d", extra+3); first[0].Line != want {
		t.Errorf("oldest kept line is %q, want %q", first[0].Line, want)
	}
}

func TestReopenKeepsData(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "zygo.db")
	st, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	putActive(t, st, "hello", "sha256:1", `{"name":"hello"}`)
	if err := st.AppendLogs(ctx, logLines("hello", "sha256:1", "r1", 2, time.Now())); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := openStore(t, path)
	f, err := st2.Function(ctx, "hello")
	if err != nil || f.Active.Hash != "sha256:1" || string(f.Active.Manifest) != `{"name":"hello"}` {
		t.Errorf("after reopening: %+v, %v", f, err)
	}
	lines, err := st2.Logs(ctx, store.LogQuery{Function: "hello"})
	if err != nil || len(lines) != 2 {
		t.Errorf("after reopening: %d log lines, %v", len(lines), err)
	}
	// New ids continue after the old ones.
	if err := st2.AppendLogs(ctx, logLines("hello", "sha256:1", "r2", 1, time.Now())); err != nil {
		t.Fatal(err)
	}
	more, _ := st2.Logs(ctx, store.LogQuery{Function: "hello", AfterID: lines[1].ID})
	if len(more) != 1 || more[0].RequestID != "r2" {
		t.Errorf("after the old ids: %+v", more)
	}
}

// TestStoreFilesAreOwnerOnly: the database (logs, tokens, records) and its
// WAL and shared-memory files are readable by their owner only.
func TestStoreFilesAreOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "zygo.db")
	os.WriteFile(path, nil, 0o644) // an old, too open file is tightened too
	s, err := store.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.SetActive(t.Context(), "f", "h"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %o, want 600", p, st.Mode().Perm())
		}
	}
}

func TestVersionsAndDeleteVersion(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	for _, h := range []string{"sha256:1", "sha256:2", "sha256:3"} {
		putActive(t, st, "fn", h, `{}`)
	}
	vs, err := st.Versions(ctx, "fn")
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 3 || vs[0].Hash != "sha256:3" || vs[2].Hash != "sha256:1" {
		t.Fatalf("versions newest first: %+v", vs)
	}
	if err := st.DeleteVersion(ctx, "fn", "sha256:3"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("deleting the active version: %v, want ErrFailedPrecondition", err)
	}
	if err := st.DeleteVersion(ctx, "fn", "sha256:1"); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteVersion(ctx, "fn", "sha256:1"); err != nil {
		t.Errorf("deleting a version twice: %v", err)
	}
	if n := rowCount(t, st, "versions", "fn"); n != 2 {
		t.Errorf("%d versions left, want 2", n)
	}
	if _, err := st.Function(ctx, "fn"); err != nil {
		t.Errorf("the function lost its active version: %v", err)
	}
}
