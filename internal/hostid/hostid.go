// Package hostid owns the block of host uids (and gids of the same numbers)
// that the daemon gives to functions and sandboxes: each owner runs as an id
// no other function, sandbox, daemon or host service shares. A Range is
// parsed from --uid-range, checked at start against the host's accounts
// (/etc/passwd, /etc/group) and subordinate ranges (/etc/subuid,
// /etc/subgid), and handed out per owner by an Allocator that records each
// owner's id in the store, so that it survives restarts.
package hostid

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/zygo-run/zygo/internal/store"
)

// Default is the range a root daemon uses without --uid-range: 65536 ids
// from 0x70000000 (1879048192-1879113727), above systemd's container range
// (524288-1879048191) and below its foreign-uid range (from 2147352576),
// far from ordinary users, system users and the usual /etc/subuid blocks
// (100000 up).
var Default = store.IDRange{First: 0x70000000, Count: 65536}

// Parse reads "START-END" (both included) or "START:COUNT". Errors name the
// flag and what is wrong; ids 0 and 65534 (nobody) and the invalid id
// 4294967295 are refused.
func Parse(s string) (store.IDRange, error) {
	var first, last uint64
	var err error
	if a, b, ok := strings.Cut(s, "-"); ok {
		first, last, err = parsePair(a, b)
		if err == nil && last < first {
			err = errors.New("END is below START")
		}
	} else if a, b, ok := strings.Cut(s, ":"); ok {
		var count uint64
		first, count, err = parsePair(a, b)
		if err == nil && count == 0 {
			err = errors.New("COUNT is 0")
		}
		last = first + count - 1
	} else {
		err = errors.New("want START-END or START:COUNT")
	}
	if err == nil && last >= 1<<32-1 {
		err = errors.New("it reaches 4294967295, which is not a valid id")
	}
	r := store.IDRange{First: uint32(first), Count: uint32(last - first + 1)}
	if err == nil && (r.Contains(0) || r.Contains(65534)) {
		err = errors.New("it contains root (0) or nobody (65534)")
	}
	if err != nil {
		return store.IDRange{}, fmt.Errorf("--uid-range %q: %w", s, err)
	}
	return r, nil
}

func parsePair(a, b string) (uint64, uint64, error) {
	x, err := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("%q is not a number", a)
	}
	y, err := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("%q is not a number", b)
	}
	return x, y, nil
}

// String formats r as START-END.
func String(r store.IDRange) string {
	return fmt.Sprintf("%d-%d", r.First, uint64(r.First)+uint64(r.Count)-1)
}

// HostFiles are the account databases Check reads; "" skips one.
type HostFiles struct {
	Passwd, Group, SubUID, SubGID string
}

// SystemFiles are the host's own.
var SystemFiles = HostFiles{Passwd: "/etc/passwd", Group: "/etc/group", SubUID: "/etc/subuid", SubGID: "/etc/subgid"}

// Check fails, naming the file, the entry and the id, when an account of
// files.Passwd or files.Group has an id in r, or a range of files.SubUID or
// files.SubGID overlaps it: some other user or service could then share a
// function's id. A missing file is fine (no entries).
func Check(r store.IDRange, files HostFiles) error {
	for _, f := range []string{files.Passwd, files.Group} {
		if err := scan(f, func(fields []string) error {
			if len(fields) < 3 {
				return nil
			}
			id, err := strconv.ParseUint(fields[2], 10, 32)
			if err == nil && r.Contains(uint32(id)) {
				return fmt.Errorf("%q has id %d", fields[0], id)
			}
			return nil
		}); err != nil {
			return inUse(r, f, err)
		}
	}
	for _, f := range []string{files.SubUID, files.SubGID} {
		if err := scan(f, func(fields []string) error {
			if len(fields) < 3 {
				return nil
			}
			first, err1 := strconv.ParseUint(fields[1], 10, 32)
			count, err2 := strconv.ParseUint(fields[2], 10, 32)
			if err1 != nil || err2 != nil || count == 0 {
				return nil
			}
			if first <= uint64(r.First)+uint64(r.Count)-1 && uint64(r.First) <= first+count-1 {
				return fmt.Errorf("%q has %d-%d", fields[0], first, first+count-1)
			}
			return nil
		}); err != nil {
			return inUse(r, f, err)
		}
	}
	return nil
}

func inUse(r store.IDRange, file string, err error) error {
	return fmt.Errorf("the uid range %s is not the daemon's own: %s: %w; choose another with --uid-range START-END",
		String(r), file, err)
}

// scan calls fn with the colon-separated fields of every line of path that
// is not blank or a comment; a missing path has no lines.
func scan(path string, fn func(fields []string) error) error {
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(strings.Split(line, ":")); err != nil {
			return err
		}
	}
	return sc.Err()
}

// Allocator hands out the ids of a Range, one per owner, recorded in a
// store. It is safe for concurrent use.
type Allocator struct {
	st *store.Store
	r  store.IDRange
}

// NewAllocator returns an Allocator of r recorded in st.
func NewAllocator(st *store.Store, r store.IDRange) *Allocator { return &Allocator{st: st, r: r} }

// Range returns the allocator's range.
func (a *Allocator) Range() store.IDRange { return a.r }

// Acquire returns owner's id, handing it one first if it has none. A released
// id is handed out again only after every id of the range has been handed
// out once, and only when no host process runs as it (RunningAs). Errors:
// errdefs.ErrUnavailable when the range is exhausted, or the store's.
func (a *Allocator) Acquire(ctx context.Context, owner string) (uint32, error) {
	return a.st.AcquireHostID(ctx, owner, a.r, RunningAs)
}

// Release gives owner's id back. The caller has stopped every process and
// removed every file of the owner.
func (a *Allocator) Release(ctx context.Context, owner string) error {
	return a.st.ReleaseHostID(ctx, owner)
}

// RunningAs reports whether any process of the host has id as its real,
// effective, saved or filesystem uid or gid (by /proc/PID/status). When /proc
// cannot be read it answers true: an id is then never reused.
func RunningAs(id uint32) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	want := strconv.FormatUint(uint64(id), 10)
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue // exited meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && (k == "Uid" || k == "Gid") {
				for _, f := range strings.Fields(v) {
					if f == want {
						return true
					}
				}
			}
		}
	}
	return false
}
