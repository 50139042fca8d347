package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/store"
)

// Each owner gets an id of its own, keeps it across a reopen of the
// database (a daemon restart), and a released id is not handed out again
// while unused ids remain, nor while inUse reports it.
func TestHostIDsSurviveRestartAndAreNotReusedEarly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "zygo.db")
	r := store.IDRange{First: 1879048192, Count: 3}
	st, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := st.AcquireHostID(ctx, "function:a", r, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.AcquireHostID(ctx, "function:b", r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a == b || !r.Contains(a) || !r.Contains(b) {
		t.Fatalf("ids %d and %d: want two different ids in %+v", a, b, r)
	}
	st.Close()

	st = openStore(t, path)
	if again, err := st.AcquireHostID(ctx, "function:a", r, nil); err != nil || again != a {
		t.Fatalf("after a restart function a holds %d (%v), want %d", again, err, a)
	}
	if err := st.ReleaseHostID(ctx, "function:a"); err != nil {
		t.Fatal(err)
	}
	c, err := st.AcquireHostID(ctx, "function:c", r, nil)
	if err != nil || c == a || c == b {
		t.Fatalf("function c got %d (%v): a released id was reused while fresh ids remained", c, err)
	}
	// The range is now handed out once; a's old id is free but still in use.
	busy := func(id uint32) bool { return id == a }
	if _, err := st.AcquireHostID(ctx, "function:d", r, busy); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("acquiring with every free id in use: %v, want ErrUnavailable", err)
	}
	if d, err := st.AcquireHostID(ctx, "function:d", r, nil); err != nil || d != a {
		t.Fatalf("function d got %d (%v), want the released %d once nothing runs as it", d, err, a)
	}
	// A narrower range moves an owner whose id falls outside it.
	narrow := store.IDRange{First: r.First + 2, Count: 1}
	if err := st.ReleaseHostID(ctx, "function:c"); err != nil {
		t.Fatal(err)
	}
	if got, err := st.AcquireHostID(ctx, "function:b", narrow, nil); err != nil || !narrow.Contains(got) {
		t.Fatalf("function b in the narrower range: %d (%v)", got, err)
	}
}
