package function

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/store"
)

// Holding one function's lock (a slow import, a stuck stop) does not stop
// another function's deploy from taking its own.
func TestNameLocksAreIndependent(t *testing.T) {
	var l nameLocks
	unlockA := l.lock("a")
	got := make(chan struct{})
	go func() { unlock := l.lock("b"); close(got); unlock() }()
	<-got // would block forever with one lock for all names
	again := make(chan struct{})
	go func() { unlock := l.lock("a"); close(again); unlock() }()
	unlockA()
	<-again
}

// Superseded versions beyond the retention count are deleted from the
// store and the disk; the active one, the retained ones and any a running
// deployment uses are kept.
func TestCollectVersions(t *testing.T) {
	ctx := context.Background()
	state := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(state, "zygo.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := testManager(0)
	m.reg, m.cfg.StateDir, m.cfg.KeepVersions = st, state, 3
	hashes := []string{}
	for i := range 6 {
		h := "sha256:" + string(rune('a'+i)) + "0000000000000000000000000000000000000000000000000000000000000000"[:63]
		hashes = append(hashes, h)
		if err := os.MkdirAll(m.versionDir("fn", h), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := st.PutVersion(ctx, store.Version{Function: "fn", Hash: h, Manifest: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // created_at is in milliseconds
	}
	if err := st.SetActive(ctx, "fn", hashes[5]); err != nil {
		t.Fatal(err)
	}
	busy := m.newDeployment("fn", hashes[0], &Manifest{Concurrency: 1}, m.versionDir("fn", hashes[0]), 0)
	m.collectVersionsLocked(ctx, "fn")

	vs, err := st.Versions(ctx, "fn")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, v := range vs {
		left = append(left, v.Hash)
	}
	want := []string{hashes[5], hashes[4], hashes[3], hashes[0]} // active, 2 retained, in use
	if !slices.Equal(left, want) {
		t.Errorf("versions left %v, want %v", left, want)
	}
	for i, h := range hashes {
		_, err := os.Stat(m.versionDir("fn", h))
		if kept := slices.Contains(want, h); kept != (err == nil) {
			t.Errorf("version %d: kept=%v, dir stat: %v", i, kept, err)
		}
	}
	busy.released.Do(func() { m.releaseDir(busy.codeDir) })
	m.collectVersionsLocked(ctx, "fn")
	if _, err := os.Stat(m.versionDir("fn", hashes[0])); err == nil {
		t.Error("a version no longer in use was not collected")
	}
}
