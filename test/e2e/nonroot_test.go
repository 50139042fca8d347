package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nonRootUID runs the daemon and its CLI of TestNonRootDeployWarns: outside the daemons'
// auto uid window (hostid.Default) and no account of the host.
const nonRootUID = 12345

// asUser returns a command running name as nonRootUID with no supplementary groups.
func asUser(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nonRootUID, Gid: nonRootUID, Groups: []uint32{}}}
	cmd.Env = append(os.Environ(), "HOME=/tmp", "XDG_STATE_HOME=")
	return cmd
}

// TestNonRootDeployWarns runs a daemon as a user that is not root, which cannot enforce the
// cgroup limits: `zygo up` prints a warning naming them (from the DeployResult, not only the
// daemon's log) and the function still serves.
func TestNonRootDeployWarns(t *testing.T) {
	requireTools(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root to run a daemon as another uid: run it as root")
	}
	base, err := os.MkdirTemp("/tmp", "zygo-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	bin := filepath.Join(base, "zygo")
	data, err := os.ReadFile(zygoBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(base, "state")
	fn := filepath.Join(base, "fn")
	for _, d := range []string{state, fn} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(state, nonRootUID, nonRootUID); err != nil {
		t.Fatal(err)
	}
	os.Chmod(state, 0o700)
	os.WriteFile(filepath.Join(fn, "zygo.toml"), []byte("name = \"nonroot\"\nruntime = \"python\"\nhandler = \"main:handler\"\n[limits]\npids = 64\n"), 0o644)
	os.WriteFile(filepath.Join(fn, "main.py"), []byte("import os\ndef handler(event, context):\n    return os.getuid()\n"), 0o644)

	daemon := asUser(bin, "serve", "--state-dir", state)
	var log bytes.Buffer
	daemon.Stdout, daemon.Stderr = &log, &log
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = daemon.Process.Signal(syscall.SIGTERM)
		_ = daemon.Wait()
	})
	cli := func(args ...string) (string, string, error) {
		cmd := asUser(bin, append([]string{"--state-dir", state}, args...)...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		return o.String(), e.String(), err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, _, err := cli("status"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the non-root daemon did not answer within 30s; log:\n%s", log.String())
		}
	}
	stdout, stderr, err := cli("up", fn)
	if err != nil {
		t.Fatalf("zygo up as uid %d: %v\nstdout: %s\nstderr: %s\ndaemon log:\n%s", nonRootUID, err, stdout, stderr, log.String())
	}
	want := "zygo: warning: limits.memory_mib (256), limits.pids (64), limits.zygote_memory_mib (1024), limits.zygote_pids (256) are not enforced"
	if !strings.Contains(stderr, want) || !strings.Contains(stdout, "nonroot: deployed") {
		t.Errorf("zygo up: stdout %q, stderr %q; want it deployed, and a warning %q", stdout, stderr, want)
	}
	out, _, err := cli("invoke", "nonroot")
	if err != nil || strings.TrimSpace(out) == "" {
		t.Errorf("invoke: %q %v", out, err)
	}
}
