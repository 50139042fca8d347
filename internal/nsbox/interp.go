package nsbox

// InterpreterBind returns the host directory a sandbox binds read-only at
// the same path so that interp can run in it (for example
// /opt/python3.12/bin/python3 → /opt/python3.12), or "" when /usr already
// covers it. Callers vet it before deploying a manifest that names interp.
func InterpreterBind(interp string) string { return interpreterPrefix(interp) }
