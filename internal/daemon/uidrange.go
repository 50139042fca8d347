package daemon

import (
	"context"
	"fmt"

	"github.com/zygo-run/zygo/internal/hostid"
	"github.com/zygo-run/zygo/internal/store"
)

// claimUIDRange claims the daemon's uid range on the host for as long as it
// runs (until the returned claim's Release) and sets cfg.uidRange to it: the
// configured one, or with cfg.uidAuto the first free block, the one recorded
// in st by the last run first, recording the one chosen. A range is usable
// when no live daemon claims an overlapping one, no account or subordinate
// range of cfg.HostFiles is in it (hostid.Check) and no host process runs
// as one of its ids, other than those st holds for this daemon's own
// functions and sandboxes.
func claimUIDRange(ctx context.Context, cfg *Config, st *store.Store) (*hostid.Claim, error) {
	held, err := st.HeldHostIDs(ctx)
	if err != nil {
		return nil, err
	}
	usable := func(r store.IDRange) error {
		if err := hostid.Check(r, cfg.HostFiles); err != nil {
			return err
		}
		if pid, id, found := hostid.ProcessIn(r, func(id uint32) bool { return held[id] }); found {
			return fmt.Errorf("the uid range %s is not the daemon's own: process %d runs as id %d; choose another with --uid-range START-END, or --uid-range auto",
				hostid.String(r), pid, id)
		}
		return nil
	}
	if !cfg.uidAuto {
		c, err := hostid.ClaimRange(cfg.UIDClaimDir, cfg.uidRange, cfg.StateDir, usable)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	last, err := st.HostRange(ctx)
	if err != nil {
		return nil, err
	}
	c, err := hostid.ClaimAuto(cfg.UIDClaimDir, last, cfg.StateDir, usable)
	if err != nil {
		return nil, err
	}
	if err := st.SetHostRange(ctx, c.Range()); err != nil {
		c.Release()
		return nil, err
	}
	if last.Count != 0 && last != c.Range() {
		cfg.Log.Warn("the uid range of the last run is taken: functions move to another (their code is given to their new uids)",
			"last", hostid.String(last), "uid_range", hostid.String(c.Range()))
	}
	cfg.uidRange = c.Range()
	return c, nil
}
