package agentproc

import "golang.org/x/sys/unix"

// unixSignalName returns "sigkill" style names for a signal number.
func unixSignalName(n int) string {
	name := unix.SignalName(unix.Signal(n))
	if name == "" {
		return "signal"
	}
	return name
}
