package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/forkcheck"
)

// TestCheckFunctions runs the auditor as a user would, and proves it can
// fail: a probe built to repeat (a fixed seed) is flagged.
func TestCheckFunctions(t *testing.T) {
	requireTools(t)
	cmd := execZygo("check", "functions", "-n", "5")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("zygo check functions: %v\n%s", err, out)
	}
	for _, want := range []string{"numpy np.random.random()", "crypto.randomBytes(16)", "5 different", "0 fail"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}

	d := startDaemon(t, "")
	bad := writeFunction(t, map[string]string{
		"zygo.toml": "name = \"bad-probe\"\nruntime = \"python\"\nhandler = \"main:handler\"\n",
		"main.py": `
import random
def handler(event, context):
    random.seed(0)              # a probe built to repeat
    return {"random.random()": random.random(), "pid": __import__("os").getpid()}
`,
	})
	probes := []forkcheck.Probe{{Name: "bad-probe", Dir: bad, Specs: map[string]forkcheck.Spec{
		"random.random()": {Expect: forkcheck.Differs},
		"pid":             {Expect: forkcheck.Differs},
	}}}
	rep, err := forkcheck.RunFunctions(context.Background(), d.Client, probes, "", 5)
	if err != nil {
		t.Fatal(err)
	}
	verdicts := map[string]forkcheck.Verdict{}
	for _, r := range rep.Rows {
		verdicts[r.Name] = r.Verdict
	}
	if verdicts["random.random()"] != forkcheck.Fail || verdicts["pid"] != forkcheck.Pass {
		t.Fatalf("the auditor did not flag the fixed seed: %+v", rep.Rows)
	}
}
