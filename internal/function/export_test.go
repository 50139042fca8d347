package function

import "time"

// SetStopRunner replaces how m stops a deployment's runtime.
func SetStopRunner(m *Manager, stop func(Runner)) { m.stopRunner = stop }

// SetRestartBackoff sets the first and longest wait between failed restarts.
func SetRestartBackoff(m *Manager, first, longest time.Duration) {
	m.restartBackoff = [2]time.Duration{first, longest}
}
