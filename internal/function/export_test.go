package function

// SetStopRunner replaces how m stops a deployment's runtime.
func SetStopRunner(m *Manager, stop func(Runner)) { m.stopRunner = stop }
