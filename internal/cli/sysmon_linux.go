//go:build linux

package cli

import (
	"fmt"
	"os"
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
// stay backed off until it actually has a P to retake; the value, the largest the runtime
// takes (2^31-1 ms, 24.8 days), makes the trace itself print only when the host's
// monotonic clock (its uptime) passes a multiple of it: one "SCHED" line on stderr at
// start on a host up longer than that, and one every 24.8 days after. The runtime reads
// GODEBUG once, before main, so the daemon re-executes itself with it set.
const (
	sysmonGODEBUG = "schedtrace=2147483647"
	// reexecMarker carries the caller's GODEBUG (or "unset") across the re-execution, so
	// that the daemon's own children (bwrap, python3, runsc) get the environment the daemon
	// was started with.
	reexecMarker = "ZYGO_SERVE_REEXEC"
)

// godebugForServe returns the GODEBUG the daemon should run with, given the value it was
// started with (set says whether the variable was set at all), and whether a re-execution
// is needed: none when the caller set schedtrace itself (GODEBUG=schedtrace=0 keeps Go's
// default behaviour).
func godebugForServe(godebug string, set bool) (string, bool) {
	for _, field := range strings.Split(godebug, ",") {
		if k, _, _ := strings.Cut(field, "="); strings.TrimSpace(k) == "schedtrace" {
			return godebug, false
		}
	}
	if !set || godebug == "" {
		return sysmonGODEBUG, true
	}
	return godebug + "," + sysmonGODEBUG, true
}

// reexecForSysmon re-executes the running binary (/proc/self/exe, with the same arguments)
// with sysmonGODEBUG added to GODEBUG, unless that is done already or the caller chose a
// schedtrace of their own. It returns only when no re-execution happens: after one, it
// puts the caller's GODEBUG back in the environment (the runtime has read it already), and
// it returns an error only when execve itself failed, which the caller may log and go on
// without. Call it before the daemon opens or starts anything: execve keeps the pid and
// every descriptor not marked close-on-exec.
func reexecForSysmon() error {
	if orig, ok := os.LookupEnv(reexecMarker); ok {
		os.Unsetenv(reexecMarker)
		if orig == "unset" {
			os.Unsetenv("GODEBUG")
		} else {
			os.Setenv("GODEBUG", strings.TrimPrefix(orig, "="))
		}
		return nil
	}
	cur, set := os.LookupEnv("GODEBUG")
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
	err := syscall.Exec("/proc/self/exe", os.Args, env)
	return fmt.Errorf("re-executing the daemon with GODEBUG=%s (it runs on without it): %w", want, err)
}
