package e2esandbox

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// yesReader is an endless run of "y\n".
type yesReader struct{}

func (yesReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = "y\n"[i%2]
	}
	return len(p) &^ 1, nil
}

// peakRSSKiB returns the peak resident set (VmHWM) of process pid, in KiB.
func peakRSSKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// TestExecStdinStreams: `zygo sandbox exec -i` streams stdin through the daemon and the guest
// to the command while its output streams back. cat echoes a line before the next is written
// (so stdin is not collected first), stdin's EOF ends cat, 64 MiB pass with bounded memory in
// the CLI and the daemon, and without -i the command does not get the CLI's stdin.
func TestExecStdinStreams(t *testing.T) {
	d := startDaemon(t)
	d.OK("sandbox", "create", "--name", "io")

	// Interactive: one line at a time.
	cmd := exec.Command(zygoBin, "--state-dir", d.StateDir, "sandbox", "exec", "-i", "io", "--", "cat")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for _, l := range []string{"one", "two", "three"} {
		io.WriteString(stdin, l+"\n")
		select {
		case got := <-lines:
			if got != l {
				t.Fatalf("cat echoed %q, want %q", got, l)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no echo of %q while stdin stays open (stdin collected before the command runs?); stderr: %s", l, stderr.String())
		}
	}
	stdin.Close()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("cat after stdin's EOF: %v; stderr: %s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("cat did not end after its stdin was closed")
	}

	// 64 MiB through wc -c. Neither the CLI nor the daemon holds it: each
	// one's peak grows by far less than the input over the same command with
	// 1 KiB (the CLI's own baseline: the binary, the runtime, its buffers).
	const size = 64 << 20
	small := exec.Command(zygoBin, "--state-dir", d.StateDir, "sandbox", "exec", "-i", "io", "--", "wc", "-c")
	small.Stdin = io.LimitReader(yesReader{}, 1<<10)
	if out, err := small.Output(); err != nil || strings.TrimSpace(string(out)) != "1024" {
		t.Fatalf("wc -c of 1 KiB: %q %v", out, err)
	}
	cliBase := small.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB
	daemonBefore := peakRSSKiB(t, d.Cmd.Process.Pid)
	wc := exec.Command(zygoBin, "--state-dir", d.StateDir, "sandbox", "exec", "-i", "io", "--", "wc", "-c")
	wc.Stdin = io.LimitReader(yesReader{}, size)
	out, err := wc.Output()
	if err != nil || strings.TrimSpace(string(out)) != strconv.Itoa(size) {
		t.Fatalf("wc -c of 64 MiB: %q %v", out, err)
	}
	cliPeak := wc.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB
	daemonAfter := peakRSSKiB(t, d.Cmd.Process.Pid)
	t.Logf("peak RSS: CLI %d MiB (%d MiB for 1 KiB); daemon %d MiB before, %d MiB after", cliPeak>>10, cliBase>>10, daemonBefore>>10, daemonAfter>>10)
	// Holding the input would grow it by at least 64 MiB; the runtime's own
	// growth under a loaded machine (GC pacing, huge pages) was seen at 35.
	if cliPeak-cliBase > 48<<10 {
		t.Errorf("the CLI's peak grew by %d MiB for a 64 MiB stdin: it holds the input", (cliPeak-cliBase)>>10)
	}
	if daemonAfter-daemonBefore > 32<<10 {
		t.Errorf("the daemon's peak grew by %d MiB for a 64 MiB stdin: it holds the input", (daemonAfter-daemonBefore)>>10)
	}

	// Without -i the CLI's stdin is not the command's: cat reads /dev/null and ends.
	if o, e, code := d.CLIIn("must not arrive\n", "sandbox", "exec", "io", "--", "cat"); code != 0 || o != "" {
		t.Fatalf("exec without -i: exit %d, stdout %q, stderr %q", code, o, e)
	}
}
