package api_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// A socket served by a process of another uid (someone swapped the
// daemon's socket in a directory they could change) gets no request from
// the client, a secret least of all: the client refuses it by its
// SO_PEERCRED uid before writing a byte.
func TestClientRefusesASocketServedByAnotherUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: it runs the fake server as another uid")
	}
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Fatal("this test needs /usr/bin/python3: install it with `apt-get install -y python3`")
	}
	dir := socketDir(t)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "zygo.sock")
	// The server prints how many bytes the first connection sent.
	srv := exec.Command(py, "-c", `
import socket, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1)
print("listening", flush=True)
c, _ = s.accept(); c.settimeout(5)
try: n = len(c.recv(65536))
except Exception: n = 0
print("received", n, flush=True)
`, sock)
	srv.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 12345, Gid: 12345}}
	srv.Stderr = os.Stderr
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	lines := bufio.NewReader(out)
	if l, _ := lines.ReadString('\n'); l != "listening\n" {
		t.Fatalf("the fake server did not start: %q", l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = zygo.NewClient(sock).SetSecret(ctx, "DB_PASSWORD", []byte("s3cret"))
	if err == nil || !strings.Contains(err.Error(), "served by uid 12345") {
		t.Errorf("SetSecret on another uid's socket: %v, want a refusal naming uid 12345", err)
	}
	if got, _ := lines.ReadString('\n'); got != "received 0\n" {
		t.Errorf("the fake server got: %q, want nothing (received 0)", got)
	}
}
