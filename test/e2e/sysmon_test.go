package e2e

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/test/e2eutil"
)

// environOf returns the environment process pid was executed with (/proc/PID/environ: what
// execve passed, which is what the Go runtime read its GODEBUG from).
func environOf(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// `zygo serve` runs with the Go scheduler's monitor kept out of its deep sleep
// (GODEBUG=schedtrace, internal/cli/sysmon_linux.go): the daemon re-executes itself with it
// before it starts anything, keeping its pid and the descriptors it inherited; a caller's
// own schedtrace stands, with no re-execution.
func TestServeRunsWithSysmonSetting(t *testing.T) {
	requireTools(t)
	inherited, err := os.CreateTemp(t.TempDir(), "inherited")
	if err != nil {
		t.Fatal(err)
	}
	defer inherited.Close()
	d := startDaemonWith(t, "", []*os.File{inherited})
	env := environOf(t, d.Cmd.Process.Pid)
	for _, want := range []string{"GODEBUG=schedtrace=2147483647", "ZYGO_SERVE_REEXEC=unset"} {
		if !contains(env, want) {
			t.Errorf("the daemon (pid %d, the one started) was not re-executed with %s: environ %q", d.Cmd.Process.Pid, want, env)
		}
	}
	// Its name is still the program's (execve of /proc/self/exe would make it "exe": pgrep -x
	// zygo, killall, systemd's status and the OOM killer's lines show it).
	if comm, err := os.ReadFile("/proc/" + strconv.Itoa(d.Cmd.Process.Pid) + "/comm"); err != nil || strings.TrimSpace(string(comm)) != "zygo" {
		t.Errorf("the daemon's name after its re-execution: %q, %v; want zygo", comm, err)
	}
	// The pid and the status call held across the re-execution (startDaemon waited for it);
	// so did fd 3, which execve keeps: it is still the file the test passed.
	link, err := os.Readlink("/proc/" + strconv.Itoa(d.Cmd.Process.Pid) + "/fd/3")
	if err != nil || link != inherited.Name() {
		t.Errorf("fd 3 of the daemon after its re-execution: %q, %v; want %s", link, err, inherited.Name())
	}

	state, err := os.MkdirTemp("", "zygo-e2e-state-") // traversable by the sandbox uids, as startDaemon's
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	p := &e2eutil.Process{T: t, Bin: zygoBin, StateDir: state, Env: []string{"GODEBUG=schedtrace=0"}}
	p.Start(20 * time.Second)
	defer p.Stop(15 * time.Second)
	env = environOf(t, p.Cmd.Process.Pid)
	if !contains(env, "GODEBUG=schedtrace=0") || containsPrefix(env, "ZYGO_SERVE_REEXEC=") {
		t.Errorf("a caller's GODEBUG=schedtrace=0 must stand without re-execution: environ %q", env)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func containsPrefix(list []string, p string) bool {
	for _, v := range list {
		if strings.HasPrefix(v, p) {
			return true
		}
	}
	return false
}

// A SIGTERM that arrives while the daemon starts, before, during or after its
// re-execution, stops it: none is caught by a handler the re-execution then throws away.
func TestServeStopsOnASignalDuringStart(t *testing.T) {
	requireTools(t)
	for i := range 40 { // SIGTERM 0-39 ms after the start, 1 ms apart
		delay := time.Duration(i)
		state, err := os.MkdirTemp("", "zygo-e2e-state-")
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(zygoBin, "serve", "--state-dir", state, "--no-sandboxes", "--no-network")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("trial %d: SIGTERM %v after start: the daemon was still running 10 s later", i, delay*time.Millisecond)
		}
		os.RemoveAll(state)
	}
}
