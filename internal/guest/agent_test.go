package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// startPair runs an Agent and a Client on this host over a unix socket in a temp dir: the
// protocol without a sandbox. It returns the client and the socket path.
func startPair(t *testing.T, token string) (*Client, string) {
	t.Helper()
	c, sock := startHost(t, token)
	dir := filepath.Dir(sock)
	boot := Boot{Token: token, Identity: Identity{SandboxID: "sb-test", Generation: strings.Repeat("ab", 16)}}
	b, _ := json.Marshal(boot)
	os.WriteFile(filepath.Join(dir, "boot.json"), b, 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a := New(Config{SocketPath: sock, BootPath: filepath.Join(dir, "boot.json"), RunDir: filepath.Join(dir, "run"), Root: filepath.Join(dir, "root")})
	if err := a.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "boot.json")); !os.IsNotExist(err) {
		t.Errorf("boot file not removed")
	}
	go a.Run(ctx)
	return c, sock
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestExecStreamsAndExitCode(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	ctx := waitCtx(t)
	var out, errb bytes.Buffer
	st, err := c.Exec(ctx, ExecRequest{Argv: []string{"/bin/sh", "-c", "cat; echo err >&2; exit 7"}, Stdin: strings.NewReader("hi")}, &out, &errb)
	if err != nil || st.Code != 7 || out.String() != "hi" || errb.String() != "err\n" {
		t.Fatalf("exec = %+v %v out=%q err=%q", st, err, out.String(), errb.String())
	}
	// A program that cannot start ends as in a shell: 127 missing, 126 not executable, a line
	// on stderr saying why.
	for _, tc := range []struct {
		argv0, stderr string
		code          int
	}{
		{"/nonexistent", "/nonexistent: no such file or directory\n", 127},
		{"no-such-command", "no-such-command: command not found\n", 127},
		{"/etc/passwd", "/etc/passwd: permission denied\n", 126},
	} {
		errb.Reset()
		st, err := c.Exec(ctx, ExecRequest{Argv: []string{tc.argv0}}, nil, &errb)
		if err != nil || st.Code != tc.code || errb.String() != tc.stderr {
			t.Errorf("exec %s = %+v %v stderr=%q, want %d %q", tc.argv0, st, err, errb.String(), tc.code, tc.stderr)
		}
	}
	// A background child holding the pipe open must not hang the call.
	t0 := time.Now()
	if _, err := c.Exec(ctx, ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 5 & echo started"}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("exec with a background child took %v", d)
	}
}

func TestWrongTokenIsRefused(t *testing.T) {
	c, sock := startPair(t, strings.Repeat("t", 64))
	ctx := waitCtx(t)
	if _, err := c.Info(ctx); err != nil {
		t.Fatal(err)
	}
	c.SetToken(strings.Repeat("x", 64)) // requests now carry a token the agent does not hold
	if _, err := c.Info(ctx); err == nil || !strings.Contains(err.Error(), "bad token") {
		t.Errorf("request with a wrong token = %v", err)
	}
	// An impostor dialling the host with a wrong token cannot finish the handshake, and the
	// host's current connection stays the agent's.
	before := c.Epoch()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hello, _ := json.Marshal(Hello{Proto: ProtocolVersion, SandboxID: "sb-test"})
	if sc, _, err := initiateChannel(conn, "nope", hello); err == nil {
		sc.Close()
		t.Fatal("impostor with a wrong token completed the handshake")
	}
	if c.Epoch() != before {
		t.Errorf("host accepted the impostor: epoch %d -> %d", before, c.Epoch())
	}
}

func TestReconnectAfterHostDrops(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	ctx := waitCtx(t)
	if _, err := c.Info(ctx); err != nil {
		t.Fatal(err)
	}
	e := c.Epoch()
	c.ResetUpTo(e)
	info, err := c.Info(ctx)
	if err != nil || c.Epoch() <= e {
		t.Fatalf("after a dropped connection: %+v %v epoch %d", info, err, c.Epoch())
	}
	if info.Generation != strings.Repeat("ab", 16) {
		t.Errorf("generation %q", info.Generation)
	}
}

func TestRunCodeKeepsGlobals(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	ctx := waitCtx(t)
	if res, err := c.RunCode(ctx, CodeRequest{Code: "import random\nr = random.Random()\nx = 41"}, nil, nil); err != nil || !res.OK {
		t.Fatalf("%+v %v", res, err)
	}
	a, _ := c.RunCode(ctx, CodeRequest{Code: "(x, r.random())"}, nil, nil)
	var out bytes.Buffer
	b, err := c.RunCode(ctx, CodeRequest{Code: "print('hi'); (x, r.random())"}, &out, nil)
	if err != nil || !strings.HasPrefix(a.Value, "(41, ") || a.Value == b.Value || out.String() != "hi\n" {
		t.Errorf("run-code values %q %q out %q err %v", a.Value, b.Value, out.String(), err)
	}
}

// A listing is capped at MaxListEntries, the first in name order, with the directory's total:
// a sandbox that fills a directory cannot make the host hold it all.
func TestListFilesIsCapped(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	dir := t.TempDir()
	n := MaxListEntries + 5
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%06d", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := c.ListFiles(waitCtx(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	if ls.Total != n || len(ls.Entries) != MaxListEntries || ls.Entries[0].Name != "f000000" ||
		ls.Entries[MaxListEntries-1].Name != fmt.Sprintf("f%06d", MaxListEntries-1) {
		t.Errorf("listing of %d: total %d, %d entries, first %q", n, ls.Total, len(ls.Entries), ls.Entries[0].Name)
	}
}

// A missing or non-directory cwd is named as such (os/exec would blame the program).
func TestExecBadCwdNamed(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	ctx := waitCtx(t)
	_, err := c.Exec(ctx, ExecRequest{Argv: []string{"/bin/pwd"}, Cwd: "/nonexistent-dir"}, nil, nil)
	if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "cwd /nonexistent-dir") {
		t.Errorf("exec in a missing cwd = %v, want ErrNotFound naming the cwd", err)
	}
	_, err = c.Exec(ctx, ExecRequest{Argv: []string{"/bin/pwd"}, Cwd: "/bin/sh"}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("exec in a file as cwd = %v", err)
	}
}

// Reading a FIFO or a device is refused at once instead of waiting for a writer forever.
func TestGetFileRefusesSpecialFiles(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var b bytes.Buffer
		err := c.GetFile(ctx, p, &b)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("GetFile(%s) = %v after %d bytes, want a refusal", p, err, b.Len())
		}
	}
}

// A put never replaces a device, a FIFO or a directory with a regular file.
func TestPutFileRefusesSpecialFiles(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A null device of the test's own (never the host's /dev/null: the agent runs on the host).
	null := filepath.Join(dir, "null")
	if err := syscall.Mknod(null, syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatalf("making a device node needs root: %v", err)
	}
	for _, p := range []string{fifo, filepath.Join(dir, "sub"), null} {
		os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
		err := c.PutFile(waitCtx(t), p, 0o644, strings.NewReader("x"))
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("PutFile(%s) = %v, want a refusal", p, err)
		}
	}
	if st, err := os.Stat(null); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("the device node was replaced: %v %v", st.Mode(), err)
	}
}

// bindMount binds src onto dst (read-only when ro) for the rest of the test.
func bindMount(t *testing.T, src, dst string, ro bool) {
	t.Helper()
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting needs root: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dst, unix.MNT_DETACH) })
	if ro {
		if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			t.Fatal(err)
		}
	}
}

// A put the sandbox's own layout forbids is the caller's error, never the guest failing (503):
// onto a mount point such as /zygo/guest (EBUSY) it is a conflict (409 class), into a
// read-only directory (EROFS) a permission error (403 class).
func TestPutFileErrorsAreTheCallers(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	dir := t.TempDir()
	src, target := filepath.Join(dir, "src"), filepath.Join(dir, "guest")
	for _, p := range []string{src, target} {
		if err := os.WriteFile(p, []byte("bin"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bindMount(t, src, target, false)
	err := c.PutFile(waitCtx(t), target, 0o644, strings.NewReader("x"))
	if !errdefs.IsFailedPrecondition(err) {
		t.Errorf("PutFile onto a mount point = %v, want ErrFailedPrecondition (409)", err)
	}
	ro := filepath.Join(dir, "ro")
	if err := os.Mkdir(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	bindMount(t, ro, ro, true)
	err = c.PutFile(waitCtx(t), filepath.Join(ro, "f"), 0o644, strings.NewReader("x"))
	if !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("PutFile into a read-only dir = %v, want ErrPermissionDenied (403)", err)
	}
}
