package daemon

import (
	"io"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The guard closes connections whose peer runs the guarded binary, before reading a byte, and
// lets others through. The binary stands in for runsc here: python3, which can dial.
func TestRunscGuardRefusesItsBinary(t *testing.T) {
	py, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		t.Fatalf("needs /usr/bin/python3: apt-get install -y python3 (%v)", err)
	}
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := guardAgainstRunsc(ln, py, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer g.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := g.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello\n"))
			accepted <- c
		}
	}()
	out, _ := exec.Command(py, "-c", `
import socket
s = socket.socket(socket.AF_UNIX); s.connect(`+"'"+sock+"'"+`)
print(repr(s.recv(10)))`).CombinedOutput()
	if string(out) != "b''\n" {
		t.Errorf("the guarded binary's connection got %q, want it closed unread (b'')", out)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 6)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello\n" {
		t.Errorf("another process's connection: %q %v", buf, err)
	}
	select { // the accepting goroutine sends after its write, which the read above may beat
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Error("the other connection was not accepted")
	}
}
