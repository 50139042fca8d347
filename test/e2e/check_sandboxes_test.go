package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/forkcheck"
)

// requireSandboxTools fails the test (never skips) when what the sandbox check needs is
// missing, saying how to install it. TestMain built the static zygo-guest next to zygo.
func requireSandboxTools(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("gVisor sandboxes need root: run these tests as root")
	}
	if _, err := os.Stat("/usr/local/bin/runsc"); err != nil {
		if _, err := exec.LookPath("runsc"); err != nil {
			t.Fatal("runsc not found: install the pinned static build with `sudo scripts/install-runsc.sh` (or `make deps`)")
		}
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import numpy").Run(); err != nil {
		t.Fatal("/usr/bin/python3 with numpy not found: run `make deps` (apt-get install -y python3-numpy)")
	}
	if _, err := os.Stat("/usr/bin/node"); err != nil {
		t.Fatal("/usr/bin/node not found: run `make deps` (apt-get install -y nodejs)")
	}
}

// TestCheckSandboxes runs `zygo check sandboxes -n 5` (one fork of 3 and 2 rollbacks) as a user
// would: it must pass, and the key rows must have the verdicts Zygo claims. Then it runs it
// again with the hidden --control row, a generator with a fixed seed: the check must flag it
// and exit 1, and nothing else may fail.
func TestCheckSandboxes(t *testing.T) {
	requireSandboxTools(t)
	out, err := exec.Command(zygoBin, "check", "sandboxes", "-n", "5").CombinedOutput()
	if err != nil {
		t.Fatalf("zygo check sandboxes: %v\n%s", err, out)
	}
	for _, want := range []string{"1 fork of 3, 2 rollbacks of the source", "5 different", "same in all 5", " 0 fail, ", "0 missing",
		"zygo check sandboxes: rollback 2:", forkcheck.RowMAC, forkcheck.RowIPv4, forkcheck.RowHostAddr, forkcheck.RowHostConn} {
		if !strings.Contains(string(out), want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}

	cmd := exec.Command(zygoBin, "check", "sandboxes", "-n", "5", "--json", "--control")
	stdout, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("with a row built to repeat: %v (want exit status 1)\n%s", err, stdout)
	}
	var rep forkcheck.SandboxesReport
	if err := json.Unmarshal(stdout, &rep); err != nil {
		t.Fatalf("decoding the JSON report: %v\n%s", err, stdout)
	}
	if rep.Mode != "sandboxes" || rep.N != 5 || len(rep.Copies) != 5 || rep.Copies[3].Kind != "rollback" {
		t.Errorf("report header: mode %q, n %d, copies %+v", rep.Mode, rep.N, rep.Copies)
	}
	verdicts := map[string]forkcheck.Row{}
	for _, r := range rep.Rows {
		verdicts[r.Probe+" "+r.Name] = r
	}
	want := map[string]forkcheck.Verdict{
		"python " + forkcheck.SandboxControlRow:                    forkcheck.Fail,
		"sandbox /run/zygo/generation":                             forkcheck.Pass,
		"sandbox hostname":                                         forkcheck.Pass,
		"sandbox /etc/machine-id":                                  forkcheck.Pass,
		"sandbox generation is the copy's own (the host's record)": forkcheck.Pass,
		"sandbox unflushed line survived":                          forkcheck.Pass,
		"sandbox " + forkcheck.RowMonotonic:                        forkcheck.Pass,
		"python os.urandom(16)":                                    forkcheck.Pass,
		"python uuid.uuid4()":                                      forkcheck.Pass,
		"go crypto/rand.Read(16 bytes)":                            forkcheck.Pass,
		"python-new random.random()":                               forkcheck.Pass,
		"node-new crypto.randomBytes(16)":                          forkcheck.Pass,
		"interpreter random.random()":                              forkcheck.Pass,
		"interpreter ssl.RAND_bytes(16)":                           forkcheck.Pass,
		"python-service random.random()":                           forkcheck.Pass,
		"node-service crypto.randomBytes(16)":                      forkcheck.Pass,
		"python random.random()":                                   forkcheck.Noted,
		"node crypto.randomBytes(16)":                              forkcheck.Noted,
		"sandbox boot_id":                                          forkcheck.Noted,
	}
	for row, v := range want {
		if got := verdicts[row]; got.Verdict != v {
			t.Errorf("%s: verdict %q (%v), want %q", row, got.Verdict, got.Results, v)
		}
	}
	for _, r := range rep.Rows {
		if r.Name != forkcheck.SandboxControlRow && (r.Verdict == forkcheck.Fail || r.Verdict == forkcheck.Missing) {
			t.Errorf("%s %s failed: %v", r.Probe, r.Name, r.Results)
		}
	}
	if c := verdicts["python "+forkcheck.SandboxControlRow]; c.Results["result"] != "same in all 5" {
		t.Errorf("control row: %v", c.Results)
	}
}
