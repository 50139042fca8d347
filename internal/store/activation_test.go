package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/zygo-run/zygo/internal/store"
)

// TestVersionsByActivation: Versions lists the most recently activated first, so a version
// made active again (a rollback) moves to the front with its DeployedAt, even within one
// millisecond; its CreatedAt stays when it was first stored.
func TestVersionsByActivation(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "zygo.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, h := range []string{"sha256:a", "sha256:b", "sha256:c"} {
		if err := st.PutVersion(ctx, store.Version{Function: "f", Hash: h, Manifest: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		if err := st.SetActive(ctx, "f", h); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetActive(ctx, "f", "sha256:a"); err != nil { // a rollback to the first
		t.Fatal(err)
	}
	vs, err := st.Versions(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, v := range vs {
		order = append(order, v.Hash)
	}
	if len(order) != 3 || order[0] != "sha256:a" || order[1] != "sha256:c" || order[2] != "sha256:b" {
		t.Errorf("order %v, want a (active again), c, b", order)
	}
	if !vs[0].DeployedAt.After(vs[1].DeployedAt) || vs[0].CreatedAt.After(vs[2].CreatedAt) {
		t.Errorf("a: deployed %v created %v; c deployed %v; b created %v", vs[0].DeployedAt, vs[0].CreatedAt, vs[1].DeployedAt, vs[2].CreatedAt)
	}
	if fn, err := st.Function(ctx, "f"); err != nil || fn.Active.Hash != "sha256:a" {
		t.Errorf("active %+v, %v", fn, err)
	}
}
