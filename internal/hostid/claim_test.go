package hostid_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/zygo-run/zygo/internal/hostid"
	"github.com/zygo-run/zygo/internal/store"
)

func anyRange(store.IDRange) error { return nil }

func claimDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("these tests need root: claims live in a root-only directory")
	}
	return filepath.Join(t.TempDir(), "uid-ranges")
}

// A range overlapping a live claim is refused, naming the claimer's pid and
// state dir; once released (or when its claimer died, leaving its file
// unlocked) it can be claimed again.
func TestClaimRefusesAnOverlapUntilReleased(t *testing.T) {
	dir := claimDir(t)
	a, err := hostid.ClaimRange(dir, store.IDRange{First: 300000, Count: 1000}, "/state/a", anyRange)
	if err != nil {
		t.Fatal(err)
	}
	_, err = hostid.ClaimRange(dir, store.IDRange{First: 300999, Count: 10}, "/state/b", anyRange)
	var ce *hostid.ClaimedError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) ||
		!strings.Contains(err.Error(), "/state/a") || !strings.Contains(err.Error(), "--uid-range") {
		t.Fatalf("an overlapping claim: %v, want a refusal naming pid %d and /state/a", err, os.Getpid())
	}
	if b, err := hostid.ClaimRange(dir, store.IDRange{First: 301000, Count: 10}, "/state/b", anyRange); err != nil {
		t.Errorf("an adjacent range: %v", err)
	} else {
		b.Release()
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	b, err := hostid.ClaimRange(dir, store.IDRange{First: 300999, Count: 10}, "/state/b", anyRange)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	b.Release()

	// A dead daemon's claim: the file is there, nobody holds its lock.
	if err := os.WriteFile(filepath.Join(dir, "300000-300999"), []byte("pid=1\nstate_dir=/gone\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := hostid.ClaimRange(dir, store.IDRange{First: 300500, Count: 10}, "/state/c", anyRange)
	if err != nil {
		t.Fatalf("over a stale claim: %v", err)
	}
	c.Release()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("claims left after every release: %v", ents)
	}
}

// Automatic claims, made at once by many daemons, each get a block of their
// own; a block usable refuses (an account in it) is skipped; a preferred
// block is taken when free.
func TestClaimAutoGivesEachDaemonItsOwnBlock(t *testing.T) {
	dir := claimDir(t)
	const n = 8
	claims := make([]*hostid.Claim, n)
	var wg sync.WaitGroup
	for i := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := hostid.ClaimAuto(dir, store.IDRange{}, fmt.Sprintf("/state/%d", i), anyRange)
			if err != nil {
				t.Error(err)
				return
			}
			claims[i] = c
		}()
	}
	wg.Wait()
	seen := map[store.IDRange]bool{}
	for _, c := range claims {
		if c == nil {
			continue
		}
		r := c.Range()
		if seen[r] || r.Count != 65536 || (r.First-hostid.Default.First)%65536 != 0 {
			t.Errorf("block %s: shared, or not a block of the window", hostid.String(r))
		}
		seen[r] = true
		defer c.Release()
	}
	skipFirst := func(r store.IDRange) error {
		if r.Contains(hostid.Default.First + n*65536) {
			return errors.New("an account is in it")
		}
		return nil
	}
	c, err := hostid.ClaimAuto(dir, store.IDRange{}, "/state/x", skipFirst)
	if err != nil {
		t.Fatal(err)
	}
	if want := hostid.Default.First + (n+1)*65536; c.Range().First != want {
		t.Errorf("with block %d refused: got %s, want the block from %d", n, hostid.String(c.Range()), want)
	}
	c.Release()
	pref := store.IDRange{First: hostid.Default.First + 100*65536, Count: 65536}
	c, err = hostid.ClaimAuto(dir, pref, "/state/y", anyRange)
	if err != nil || c.Range() != pref {
		t.Fatalf("preferred %s: got %v, %v", hostid.String(pref), c, err)
	}
	c.Release()
}

// ProcessIn finds a host process running as an id of the range, unless it
// is one the caller owns.
func TestProcessInFindsAProcessRunningInTheRange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: it runs a process as another uid")
	}
	const id = 1879900000
	r := store.IDRange{First: id - 5, Count: 10}
	cmd := exec.Command("/bin/sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: id, Gid: id}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid, got, found := hostid.ProcessIn(r, nil)
	if !found || got != id {
		t.Fatalf("ProcessIn = %d, %d, %v; want pid %d as %d", pid, got, found, cmd.Process.Pid, id)
	}
	if _, _, found := hostid.ProcessIn(r, func(x uint32) bool { return x == id }); found {
		t.Error("a process running as an owned id was reported")
	}
}
