package e2e

import (
	"encoding/json"
	"strings"
	"testing"
)

// retargetReport is what the reach fixture's retarget action returns: the
// outcome of each call on every other process it saw, on itself (pid 0),
// and of the "process group" and "user" kinds with who 0.
type retargetReport struct {
	Self          int                          `json:"self"`
	Comm          map[string]string            `json:"comm"`
	Others        map[string]map[string]string `json:"others"`
	Own           map[string]string            `json:"own"`
	OwnUser       string                       `json:"own_user"`
	OwnPgrp       string                       `json:"own_pgrp"`
	OwnIoprioUser string                       `json:"own_ioprio_user"`
}

// inherited is what the reach fixture's limits action returns: what a
// request's process got from its zygote.
type inherited struct {
	FSize  int64 `json:"fsize"`
	NoFile int64 `json:"nofile"`
	Nice   int   `json:"nice"`
	CPUs   int   `json:"cpus"`
	Policy int   `json:"policy"`
	IOPrio int   `json:"ioprio"`
}

// checkRetarget (issue 12, point 1, the calls that act on another process
// by pid without the ptrace access check): a request sets, on the zygote
// (PID 1) and on each idle pre-forked sibling, RLIMIT_FSIZE 0, RLIMIT_NOFILE
// 3, nice 19, one CPU, SCHED_IDLE and idle I/O priority, through prlimit64,
// setpriority, sched_setaffinity, sched_setattr, sched_setparam,
// sched_setscheduler and ioprio_set, and tries migrate_pages, move_pages
// and process_madvise: every one fails with EPERM (the default seccomp
// filter, and the ptrace check for the last three), while the same calls on
// itself (pid 0) succeed. Then the next requests, served by the siblings it
// attacked and by new children, run with what they had before, from the
// same zygote.
func checkRetarget(t *testing.T, d *Daemon) {
	var before inherited
	d.Invoke("reach", map[string]any{"action": "limits"}, &before)
	var r retargetReport
	for range 50 { // until an idle sibling is in view beside PID 1 (the pool refills after each request)
		r = retargetReport{}
		d.Invoke("reach", map[string]any{"action": "retarget"}, &r)
		if len(r.Others) >= 2 {
			break
		}
	}
	if _, ok := r.Others["1"]; !ok || len(r.Others) < 2 {
		t.Fatalf("want the zygote (PID 1) and an idle pre-forked sibling in view, saw %v", r.Comm)
	}
	for pid, calls := range r.Others {
		for call, outcome := range calls {
			// A sibling that has just served a request may be a zombie by
			// then: it has no memory left to act on (ESRCH).
			viaPtrace := call == "migrate_pages" || call == "move_pages" || call == "process_madvise"
			if outcome != "EPERM" && !(viaPtrace && (outcome == "EACCES" || outcome == "ESRCH" && pid != "1")) {
				t.Errorf("pid %s (%s): %s from another request: %s, want EPERM", pid, r.Comm[pid], call, outcome)
			}
		}
	}
	for call, outcome := range r.Own {
		if outcome != "ok" {
			t.Errorf("%s on the request itself (pid 0): %s, want ok", call, outcome)
		}
	}
	for what, outcome := range map[string]string{"setpriority(PRIO_USER, 0)": r.OwnUser,
		"setpriority(PRIO_PGRP, 0)": r.OwnPgrp, "ioprio_set(IOPRIO_WHO_USER, 0)": r.OwnIoprioUser} {
		if outcome != "EPERM" {
			t.Errorf("%s (reaches the zygote): %s, want EPERM", what, outcome)
		}
	}
	for i := range 4 {
		res, err := d.TryInvoke("reach", map[string]any{"action": "limits"})
		if err != nil {
			t.Errorf("request %d after the attack: %v", i, err)
			continue
		}
		var after inherited
		if err := json.Unmarshal(res.Value, &after); err != nil || after != before {
			t.Errorf("request %d after the attack inherited %+v (%v), want %+v as before", i, after, err, before)
		}
	}
	logs := strings.Join(d.Logs("reach", ""), "\n")
	if strings.Count(logs, "zygote ready in") != 1 || strings.Contains(logs, "zygote died") {
		t.Errorf("the zygote did not keep serving:\n%s", logs)
	}
}
