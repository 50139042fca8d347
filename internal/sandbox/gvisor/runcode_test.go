package gvisor_test

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// TestManagerRunCodeBoundsAndServiceRestart, on a real guest: a 40 MiB print is cut at
// guest.MaxCodeOutputBytes with the marker and the variables survive; code that swallows
// KeyboardInterrupt is killed after the grace and the next call gets a fresh interpreter; a
// failing service is restarted, a restart = "no" one is not.
func TestManagerRunCodeBoundsAndServiceRestart(t *testing.T) {
	h := newHarness(t, nil)
	ctx := tctx(t)
	sb, err := h.m.Create(ctx, sandbox.CreateOptions{Services: []guest.Service{
		{Name: "fails", Argv: []string{"/bin/sh", "-c", "echo start >> /tmp/fails.log; exit 1"}},
		{Name: "once", Restart: guest.RestartNo, Argv: []string{"/bin/sh", "-c", "echo start >> /tmp/once.log; exit 1"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(code string, timeout time.Duration, out, errb *bytes.Buffer) guest.CodeResult {
		t.Helper()
		res, err := h.m.RunCode(ctx, sb.ID, guest.CodeRequest{Code: code, Timeout: timeout}, out, errb)
		if err != nil {
			t.Fatalf("run-code %q: %v", code, err)
		}
		return res
	}
	run("x = 41", 0, nil, nil)
	var out, errb bytes.Buffer
	t0 := time.Now()
	res := run("print('y' * (40 << 20))", 0, &out, &errb)
	t.Logf("40 MiB print answered in %v", time.Since(t0).Round(time.Millisecond))
	if !res.OK || !res.OutputTruncated || out.Len() != guest.MaxCodeOutputBytes || errb.String() != guest.OutputTruncatedMarker {
		t.Errorf("40 MiB print: %+v, stdout %d bytes, stderr %q", res, out.Len(), errb.String())
	}
	if res := run("x + 1", 0, nil, nil); res.Value != "42" {
		t.Errorf("after the truncated call: %+v, want 42", res)
	}

	t0 = time.Now()
	res = run("import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass\n", 500*time.Millisecond, nil, nil)
	t.Logf("swallowed KeyboardInterrupt answered in %v: %s", time.Since(t0).Round(time.Millisecond), res.Error)
	if res.OK || !res.Restarted || !strings.Contains(res.Error, "interpreter restarted") {
		t.Errorf("code swallowing KeyboardInterrupt: %+v, want Restarted", res)
	}
	if res := run("'x' in globals()", 0, nil, nil); res.Value != "False" {
		t.Errorf("after the restart: %+v, want a fresh interpreter", res)
	}

	starts := func(log string) int {
		n, _ := strconv.Atoi(strings.TrimSpace(h.sh(t, sb.ID, "cat "+log+" 2>/dev/null | wc -l")))
		return n
	}
	for i := 0; i < 100 && starts("/tmp/fails.log") < 3; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if n := starts("/tmp/fails.log"); n < 3 {
		t.Errorf("the failing service started %d times, want it restarted (≥ 3)", n)
	}
	if n := starts("/tmp/once.log"); n != 1 {
		t.Errorf("the restart = no service started %d times, want 1", n)
	}
}
