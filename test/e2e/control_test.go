package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestControlSocketSpeaksOnlyForTheAgent: a process the function's import
// started and handed the agent's control socket (fd 3) to is not the agent.
// The supervisor takes a control message only from the sandbox's PID 1 (the
// sender's SCM_CREDENTIALS against the pid bwrap reported): a forged ready
// before the Node worker's own fails the deploy, naming the cause (it would
// have put the forger, not the worker, in the request's cgroup: the handler
// ran past its cpu_ms), and forged exited messages after a Python zygote's
// ready are dropped (they would have ended requests whose children were
// still running).
func TestControlSocketSpeaksOnlyForTheAgent(t *testing.T) {
	requireNode(t)
	d := startDaemon(t, "")
	out, errOut, code := d.CLI("up", fixture("forgeready"))
	if code == 0 {
		res, err := d.TryInvoke("forgeready", map[string]any{})
		t.Fatalf("a worker whose import forged ready was deployed; invoke: %v %v", res, err)
	}
	if !strings.Contains(out+errOut, "control socket") {
		t.Errorf("the deploy's error does not name the control socket:\nstdout: %s\nstderr: %s", out, errOut)
	}

	d.Up(fixture("forgectl"))
	// The forger floods exited for every seq from 2 s after import for 8 s:
	// requests in flight through it must all answer with their own value.
	until := time.Now().Add(9 * time.Second)
	for n := 0; time.Now().Before(until); n++ {
		var v struct{ N int }
		d.Invoke("forgectl", map[string]any{"n": n, "sleep": 0.2}, &v)
		if v.N != n {
			t.Fatalf("request %d answered %d", n, v.N)
		}
	}
	if !strings.Contains(d.Log.String(), "dropped a control message not sent by the agent") {
		t.Errorf("no forged message was dropped (did the forger run?); daemon log:\n%s", d.Log)
	}
}
