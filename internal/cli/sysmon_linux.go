//go:build linux

package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// The daemon's runtime setting for its scheduler's monitor thread (sysmon).
//
// Go's sysmon sleeps 20 µs between checks for its first 50 rounds after it wakes from its
// deep sleep (taken whenever every P is idle) because a goroutine entered a system call,
// and only then backs off towards 10 ms. The daemon goes idle and busy again several times
// a request, so it paid those 20 µs ticks over and over: 40% of its context switches and
// 14% of its CPU under 8-client load (docs/BENCHMARKS.md, ninth round). Setting the
// runtime's schedtrace keeps sysmon out of that deep sleep, so its ticks back off once and
// stay backed off until it actually has a P to retake. The value is the largest the
// runtime takes (2^31-1 ms, 24.8 days): the trace prints (one "SCHED" line on stderr)
// whenever the host's monotonic clock, its uptime, passes a multiple of it while the
// daemon runs; and a crash or SIGQUIT dump starts with the scheduler's state. The runtime
// reads GODEBUG once, before main, so the daemon re-executes itself with it set.
const (
	sysmonGODEBUG = "schedtrace=2147483647"
	// reexecMarker carries the caller's GODEBUG ("=" and its value, or "unset") across the
	// re-execution, so that the daemon's own children (runsc) get the environment the
	// daemon was started with.
	reexecMarker = "ZYGO_SERVE_REEXEC"
)

// wantsReexec reports whether args (the command line without the program name) run the
// daemon: `serve`, wherever the global flags put it, and not for its help.
func wantsReexec(args []string) bool {
	if !slices.Contains(args, "serve") { // every other command: no command tree built twice
		return false
	}
	root := newRootCmd(&globals{})
	cmd, _, err := root.Find(args)
	if err != nil || cmd == nil || cmd.Name() != "serve" || cmd.Parent() != root {
		return false
	}
	for _, a := range args {
		if a == "-h" || a == "--help" {
			return false
		}
	}
	return true
}

// sysmonErr is why the daemon could not re-execute itself (reexecForSysmon), for serve to
// log once it has a logger; nil when it did or did not need to.
var sysmonErr error

// beforeSignals runs, before the CLI installs its signal handlers, what must come first in
// the process: the daemon's re-execution (reexecForSysmon) when args run `zygo serve`.
func beforeSignals(args []string) {
	if wantsReexec(args) {
		sysmonErr = reexecForSysmon()
	}
}

// godebugForServe returns the GODEBUG the daemon should run with, given the value it was
// started with (set says whether the variable was set at all), and whether a re-execution
// is needed: none when the caller set schedtrace itself (GODEBUG=schedtrace=0 keeps Go's
// default). Keys are matched as the runtime matches them: exactly, spaces included.
func godebugForServe(godebug string, set bool) (string, bool) {
	for _, field := range strings.Split(godebug, ",") {
		if k, _, ok := strings.Cut(field, "="); ok && k == "schedtrace" {
			return godebug, false
		}
	}
	if !set || godebug == "" {
		return sysmonGODEBUG, true
	}
	return godebug + "," + sysmonGODEBUG, true
}

// reexecForSysmon re-executes the running binary, with the same arguments, environment and
// descriptors and sysmonGODEBUG added to GODEBUG, unless that is done already or the
// caller chose a schedtrace of their own. Call it before anything is opened, started or
// listened for (signals included: a signal caught before execve would be lost). It returns
// only when no re-execution happens: after one it puts the caller's GODEBUG back in the
// environment (the runtime has read it already) and the process's name back (execve of
// /proc/self/exe names it "exe"); it returns an error only when execve itself failed,
// which the daemon logs and runs on without.
func reexecForSysmon() error {
	cur, set := os.LookupEnv("GODEBUG")
	if orig, ok := os.LookupEnv(reexecMarker); ok {
		os.Unsetenv(reexecMarker)
		origVal, origSet := strings.CutPrefix(orig, "=")
		if want, _ := godebugForServe(origVal, origSet); set && cur == want {
			// Our own re-execution: the marker matches what it set.
			if origSet {
				os.Setenv("GODEBUG", origVal)
			} else {
				os.Unsetenv("GODEBUG")
			}
			fixComm()
			return nil
		}
		// A marker the daemon did not set (its caller's environment): ignored.
	}
	want, needed := godebugForServe(cur, set)
	if !needed {
		return nil
	}
	marker := "unset"
	if set {
		marker = "=" + cur // "=" keeps an empty GODEBUG apart from an unset one
	}
	env := make([]string, 0, len(os.Environ())+2)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GODEBUG=") && !strings.HasPrefix(kv, reexecMarker+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, "GODEBUG="+want, reexecMarker+"="+marker)
	err := syscall.Exec(selfPath(), os.Args, env)
	return fmt.Errorf("re-executing the daemon with GODEBUG=%s (it runs on without it): %w", want, err)
}

// selfPath returns the path to execute the running binary by: its own path when that still
// names the same file (so the process keeps its name), else /proc/self/exe (a binary
// replaced or deleted since it started).
func selfPath() string {
	if exe, err := os.Executable(); err == nil {
		a, errA := os.Stat(exe)
		b, errB := os.Stat("/proc/self/exe")
		if errA == nil && errB == nil && os.SameFile(a, b) {
			return exe
		}
	}
	return "/proc/self/exe"
}

// fixComm names the process's threads after its program (os.Args[0], at most 15 bytes)
// when execve of /proc/self/exe named them "exe"; threads made later inherit the name.
func fixComm() {
	if b, err := os.ReadFile("/proc/self/comm"); err != nil || strings.TrimSpace(string(b)) != "exe" {
		return
	}
	name := filepath.Base(os.Args[0])
	if len(name) > 15 {
		name = name[:15]
	}
	tasks, _ := filepath.Glob("/proc/self/task/*/comm")
	for _, t := range tasks {
		_ = os.WriteFile(t, []byte(name), 0)
	}
}
