package guest

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// newTestServices returns a services set with its own reaper, stopped at the end of the test.
func newTestServices(t *testing.T) *services {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := newReaper()
	go r.run(ctx)
	s := &services{log: slog.New(slog.DiscardHandler),
		reaper: r, env: func() []string { return defaultEnv }, root: t.TempDir()}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		s.stopAll(sctx)
		cancel()
	})
	return s
}

// startLog is a shell snippet that appends "PID NANOSECONDS" to log at every start.
func startLog(log string) string { return `echo "$$ $(date +%s%N)" >> ` + log + "; " }

// readStarts returns the pids and start times the service logged.
func readStarts(t *testing.T, log string) (pids []int, at []time.Time) {
	t.Helper()
	b, _ := os.ReadFile(log)
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		f := strings.Fields(l)
		pid, _ := strconv.Atoi(f[0])
		ns, _ := strconv.ParseInt(f[1], 10, 64)
		pids, at = append(pids, pid), append(at, time.Unix(0, ns))
	}
	return pids, at
}

func statusOf(s *services, name string) ServiceStatus {
	for _, st := range s.status() {
		if st.Name == name {
			return st
		}
	}
	return ServiceStatus{}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestServiceRestartPolicies: a failing service is restarted with a doubling backoff (each gap
// at least the delay), capped; "no" is never restarted; on-failure leaves a clean exit alone
// and always does not.
func TestServiceRestartPolicies(t *testing.T) {
	dir := t.TempDir()
	s := newTestServices(t)
	s.delayMax = 400 * time.Millisecond // default min (100 ms); a low cap to see it
	logOf := func(n string) string { return filepath.Join(dir, n+".log") }
	s.startAll([]Service{
		{Name: "fails", Argv: []string{"/bin/sh", "-c", startLog(logOf("fails")) + "exit 1"}},
		{Name: "never", Restart: RestartNo, Argv: []string{"/bin/sh", "-c", startLog(logOf("never")) + "exit 1"}},
		{Name: "clean", Restart: RestartOnFailure, Argv: []string{"/bin/sh", "-c", startLog(logOf("clean")) + "exit 0"}},
		{Name: "always", Restart: RestartAlways, Argv: []string{"/bin/sh", "-c", startLog(logOf("always")) + "exit 0"}},
	})
	waitFor(t, "5 restarts of fails", func() bool { return statusOf(s, "fails").Restarts >= 5 })
	waitFor(t, "a restart of always", func() bool { return statusOf(s, "always").Restarts >= 1 })
	// A restart counts when the process is started; its start line follows when it runs.
	waitFor(t, "6 start lines of fails", func() bool { p, _ := readStarts(t, logOf("fails")); return len(p) >= 6 })

	st := statusOf(s, "fails")
	if st.LastExit == nil || st.LastExit.Code != 1 || st.Restart != RestartOnFailure {
		t.Errorf("fails status %+v, want last exit 1 and the default on-failure", st)
	}
	pids, at := readStarts(t, logOf("fails"))
	if len(pids) < 6 {
		t.Fatalf("fails started %d times, want ≥ 6 (1 + 5 restarts)", len(pids))
	}
	// The wait before restart i is 100 ms·2^i capped at 400 ms; a gap is that wait plus the run.
	want := []time.Duration{100, 200, 400, 400, 400}
	for i, w := range want {
		if gap := at[i+1].Sub(at[i]); gap < w*time.Millisecond-5*time.Millisecond {
			t.Errorf("gap before restart %d = %v, want ≥ %v (backoff not respected)", i+1, gap, w*time.Millisecond)
		}
	}
	s.mu.Lock()
	delay := s.byNm["fails"].delay
	s.mu.Unlock()
	if delay != 400*time.Millisecond {
		t.Errorf("backoff delay %v after 5 restarts, want the 400 ms cap", delay)
	}

	time.Sleep(500 * time.Millisecond) // longer than any backoff of the others
	for name, wantStarts := range map[string]int{"never": 1, "clean": 1} {
		st := statusOf(s, name)
		if pids, _ := readStarts(t, logOf(name)); len(pids) != wantStarts || st.Restarts != 0 || st.Running || st.LastExit == nil {
			t.Errorf("%s: %d starts, status %+v; want one start, no restart", name, len(pids), st)
		}
	}
	if st := statusOf(s, "never"); st.LastExit.Code != 1 || !st.NextRestartAt.IsZero() {
		t.Errorf("never: %+v, want last exit 1 and no restart due", st)
	}
}

// TestServiceResealRestartNotDoubled: reseal's on_fork restart stops a supervised service on
// purpose, so the supervisor does not start a second one; a restart pending in backoff is
// cancelled by it too.
func TestServiceResealRestartNotDoubled(t *testing.T) {
	dir := t.TempDir()
	s := newTestServices(t)
	s.delayMin = time.Second // the backoff of "flaky" is pending when reseal comes
	run, flaky := filepath.Join(dir, "run.log"), filepath.Join(dir, "flaky.log")
	s.startAll([]Service{
		{Name: "run", OnFork: OnForkRestart, Restart: RestartAlways,
			Argv: []string{"/bin/sh", "-c", startLog(run) + "exec sleep 1000"}},
		// Fails on its first start, runs from the second on.
		{Name: "flaky", OnFork: OnForkRestart,
			Argv: []string{"/bin/sh", "-c", startLog(flaky) + `[ "$(wc -l < ` + flaky + `)" -ge 2 ] && exec sleep 1000; exit 1`}},
		{Name: "kept", Argv: []string{"/bin/sh", "-c", "exec sleep 1000"}},
	})
	waitFor(t, "run up and flaky in backoff", func() bool {
		pids, _ := readStarts(t, run)
		return len(pids) == 1 && !statusOf(s, "flaky").NextRestartAt.IsZero()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lines, err := s.onFork(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(lines, "\n")
	for _, want := range []string{"run: restarted", "flaky: restarted (restarts 0, last exit code 1)", "kept: kept"} {
		if !strings.Contains(got, want) {
			t.Errorf("reseal lines %q, want %q", got, want)
		}
	}
	time.Sleep(1500 * time.Millisecond) // past the backoff that was pending, and several of run's
	for name, log := range map[string]string{"run": run, "flaky": flaky} {
		pids, _ := readStarts(t, log)
		st := statusOf(s, name)
		if len(pids) != 2 || !st.Running || st.PID != pids[1] || st.Restarts != 0 || !st.NextRestartAt.IsZero() {
			t.Errorf("%s: starts %v, status %+v; want exactly 2 starts (boot, reseal), the second running, no restart due", name, pids, st)
			continue
		}
		if err := syscall.Kill(pids[0], 0); err == nil {
			t.Errorf("%s: the first process %d is still alive", name, pids[0])
		}
	}
}

// TestValidateServices: bad policies and shapes are refused, naming the service and field.
func TestValidateServices(t *testing.T) {
	ok := []Service{{Name: "a", Argv: []string{"x"}}, {Name: "b", Argv: []string{"x"}, OnFork: OnForkSignal, Signal: 10, Restart: RestartNo}}
	if err := ValidateServices(ok); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		svc  Service
		want string
	}{
		{Service{Name: "a", Argv: []string{"x"}, Restart: "sometimes"}, `restart "sometimes"`},
		{Service{Name: "a", Argv: []string{"x"}, Restart: "On-Failure"}, `restart "On-Failure"`},
		{Service{Name: "a", Argv: []string{"x"}, OnFork: "reboot"}, `on_fork "reboot"`},
		{Service{Name: "a", Argv: []string{"x"}, Signal: 10}, "signal 10"},
		{Service{Name: "a"}, "no argv"},
		{Service{Name: "a/b", Argv: []string{"x"}}, "service name"},
		{Service{Name: "b", Argv: []string{"x"}}, "declared twice"},
	} {
		err := ValidateServices([]Service{{Name: "b", Argv: []string{"y"}}, c.svc})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ValidateServices(%+v) = %v, want an error with %q", c.svc, err, c.want)
		}
	}
}

// TestExecTimeoutEscalates: a timeout sends SIGTERM to the whole group (a trap can still
// answer), then SIGKILL ExecKillGrace later to what ignores it, including children left behind.
func TestExecTimeoutEscalates(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	ctx := waitCtx(t)
	var out bytes.Buffer
	st, err := c.Exec(ctx, ExecRequest{Argv: []string{"/bin/sh", "-c", "trap 'echo bye; exit 3' TERM; sleep 100 & wait"},
		Timeout: 300 * time.Millisecond}, &out, nil)
	if err != nil || !st.TimedOut || st.Code != 3 || out.String() != "bye\n" {
		t.Errorf("a TERM trap = %+v %v out %q, want it to run (exit 3, timed out)", st, err, out.String())
	}
	t0 := time.Now()
	st, err = c.Exec(ctx, ExecRequest{Argv: []string{"/bin/sh", "-c", "trap '' TERM; sleep 100"}, Timeout: 300 * time.Millisecond}, nil, nil)
	if err != nil || !st.TimedOut || st.Signal != int(syscall.SIGKILL) {
		t.Errorf("ignoring TERM = %+v %v, want SIGKILL and timed out", st, err)
	}
	if d := time.Since(t0); d < ExecKillGrace {
		t.Errorf("killed after %v, before the %v grace", d, ExecKillGrace)
	}
	// The leader answers TERM, its child ignores it and keeps the pipe: the call returns, and the
	// child is killed when the grace ends.
	out.Reset()
	st, err = c.Exec(ctx, ExecRequest{Argv: []string{"/bin/sh", "-c", "(trap '' TERM; exec sleep 100) & echo $!; trap 'exit 0' TERM; wait"},
		Timeout: 300 * time.Millisecond}, &out, nil)
	if err != nil || !st.TimedOut {
		t.Fatalf("leader answering TERM = %+v %v", st, err)
	}
	child, _ := strconv.Atoi(strings.TrimSpace(out.String()))
	waitFor(t, "the child ignoring TERM to be killed", func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(child) + "/stat")
		return err != nil || strings.Contains(string(b), ") Z ")
	})
}
