package hostid

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/zygo-run/zygo/internal/store"
	"github.com/zygo-run/zygo/internal/trusted"
)

// Claims: a root daemon claims its range on the host for as long as it
// runs, so that no two daemons hand out the same ids. A claim is a file
// ClaimDir/FIRST-LAST holding the claimer's pid and state dir, flock'd by
// the claimer while it runs: a claim file nobody holds locked is stale (its
// daemon died) and is reclaimed. Every claim and release happens under an
// exclusive flock of the directory itself, so checking for overlaps and
// creating a claim is one step across daemons.

// ClaimDir is the host-wide directory of claims (root-only, 0700).
const ClaimDir = "/run/zygo/uid-ranges"

// AutoBlocks is how many 65536-id blocks from Default.First the automatic
// range (--uid-range auto) chooses among.
const AutoBlocks = 256

// Claim is a daemon's hold on a range; Release gives it up.
type Claim struct {
	dir string
	f   *os.File // the claim file, flock'd; closed by Release
	r   store.IDRange
}

// Range returns the claimed range.
func (c *Claim) Range() store.IDRange { return c.r }

// Release removes the claim. It is idempotent.
func (c *Claim) Release() error {
	if c.f == nil {
		return nil
	}
	unlock, err := lockDir(c.dir)
	if err != nil {
		return err
	}
	defer unlock()
	err = os.Remove(c.f.Name())
	c.f.Close()
	c.f = nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("releasing the uid range claim: %w", err)
	}
	return nil
}

// ClaimedError is a refusal: another live daemon claims an overlapping range.
type ClaimedError struct {
	Range, Other store.IDRange
	PID          int    // the other daemon's pid, 0 if its claim did not say
	StateDir     string // the other daemon's state dir, "" if its claim did not say
}

func (e *ClaimedError) Error() string {
	return fmt.Sprintf("the uid range %s overlaps %s, claimed by another zygo daemon (pid %d, state dir %s); choose another with --uid-range START-END, or --uid-range auto",
		String(e.Range), String(e.Other), e.PID, e.StateDir)
}

// Usable is asked, under the claim lock, whether a candidate range may be
// claimed: nil, or why not (the error is returned by ClaimRange, and skips
// the candidate in ClaimAuto).
type Usable func(r store.IDRange) error

// ClaimRange claims r in dir (ClaimDir unless testing) for the daemon of
// stateDir. Errors: *ClaimedError when a live claim overlaps r, usable's
// error, or one creating or locking the claim (dir must be trusted.Dir).
func ClaimRange(dir string, r store.IDRange, stateDir string, usable Usable) (*Claim, error) {
	unlock, err := openClaimDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return claimLocked(dir, r, stateDir, usable)
}

// ClaimAuto claims the first of AutoBlocks 65536-id blocks from
// Default.First that no live claim overlaps and usable accepts, trying
// preferred first (the block of the daemon's last run; zero for none).
// Errors: errors naming every block as taken, or one of the claim files.
func ClaimAuto(dir string, preferred store.IDRange, stateDir string, usable Usable) (*Claim, error) {
	unlock, err := openClaimDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	cands := make([]store.IDRange, 0, AutoBlocks+1)
	if preferred.Count != 0 {
		cands = append(cands, preferred)
	}
	for i := uint32(0); i < AutoBlocks; i++ {
		cands = append(cands, store.IDRange{First: Default.First + i*Default.Count, Count: Default.Count})
	}
	var last error
	for _, r := range cands {
		c, err := claimLocked(dir, r, stateDir, usable)
		var ue *unusableError
		if errors.As(err, &ue) {
			last = ue.err
			continue
		}
		var ce *ClaimedError
		if errors.As(err, &ce) {
			last = err
			continue
		}
		return c, err
	}
	return nil, fmt.Errorf("no free uid range among the %d blocks of %d ids from %d (the last: %w); choose one with --uid-range START-END",
		AutoBlocks, Default.Count, Default.First, last)
}

// openClaimDir creates dir (0700, its parent 0711) if missing, checks that
// only root can change it, and locks it; the returned func unlocks it.
func openClaimDir(dir string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return nil, fmt.Errorf("creating the uid range claims dir: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("creating the uid range claims dir: %w", err)
	}
	if err := trusted.Dir(dir, os.Geteuid()); err != nil {
		return nil, fmt.Errorf("uid range claims: %w", err)
	}
	return lockDir(dir)
}

// lockDir takes an exclusive flock of dir itself, waiting for it.
func lockDir(dir string) (func(), error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("opening the uid range claims dir: %w", err)
	}
	for {
		err = syscall.Flock(int(d.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("locking the uid range claims dir: %w", err)
	}
	return func() { d.Close() }, nil
}

// unusableError wraps usable's refusal of a candidate.
type unusableError struct{ err error }

func (e *unusableError) Error() string { return e.err.Error() }

// claimLocked claims r, the claims dir being locked: every overlapping
// claim file is either live (a *ClaimedError) or stale (removed); then
// usable is asked (its refusal wrapped in an *unusableError).
func claimLocked(dir string, r store.IDRange, stateDir string, usable Usable) (*Claim, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing uid range claims: %w", err)
	}
	for _, e := range ents {
		other, err := Parse(e.Name())
		if err != nil || !overlaps(r, other) {
			continue
		}
		if err := reclaim(filepath.Join(dir, e.Name()), r, other); err != nil {
			return nil, err
		}
	}
	if err := usable(r); err != nil {
		return nil, &unusableError{err}
	}
	p := filepath.Join(dir, String(r))
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("claiming the uid range %s: %w", String(r), err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		_, err = fmt.Fprintf(f, "pid=%d\nstate_dir=%s\n", os.Getpid(), stateDir)
		if err == nil {
			return &Claim{dir: dir, f: f, r: r}, nil
		}
	}
	f.Close()
	os.Remove(p)
	return nil, fmt.Errorf("claiming the uid range %s: %w", String(r), err)
}

// reclaim removes the claim file p of other when no daemon holds it, and
// otherwise returns the *ClaimedError of r against it.
func reclaim(p string, r, other store.IDRange) error {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the uid range claim %s: %w", p, err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil { // stale: its daemon is gone
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("removing the stale uid range claim %s: %w", p, err)
		}
		return nil
	}
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		return fmt.Errorf("checking the uid range claim %s: %w", p, err)
	}
	ce := &ClaimedError{Range: r, Other: other}
	b := make([]byte, 4096)
	n, _ := f.ReadAt(b, 0)
	for _, line := range strings.Split(string(b[:n]), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "pid":
			ce.PID, _ = strconv.Atoi(v)
		case "state_dir":
			ce.StateDir = v
		}
	}
	return ce
}

func overlaps(a, b store.IDRange) bool {
	return uint64(a.First) < uint64(b.First)+uint64(b.Count) && uint64(b.First) < uint64(a.First)+uint64(a.Count)
}

// ProcessIn returns a host process with a real, effective, saved or
// filesystem uid or gid in r for which own reports false (own may be nil),
// and that id. found is false when there is none, or /proc cannot be read.
func ProcessIn(r store.IDRange, own func(id uint32) bool) (pid int, id uint32, found bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0, false
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		for _, id := range procIDs(pid) {
			if r.Contains(id) && (own == nil || !own(id)) {
				return pid, id, true
			}
		}
	}
	return 0, 0, false
}

// procIDs returns the uids and gids of /proc/PID/status; none if it exited.
func procIDs(pid int) []uint32 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return nil
	}
	var ids []uint32
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "Uid" || k == "Gid") {
			for _, f := range strings.Fields(v) {
				if n, err := strconv.ParseUint(f, 10, 32); err == nil {
					ids = append(ids, uint32(n))
				}
			}
		}
	}
	return ids
}

func (e *unusableError) Unwrap() error { return e.err }
