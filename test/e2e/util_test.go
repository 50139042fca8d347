package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"

	"github.com/zygo-run/zygo/internal/daemon"
	"os"
	"path/filepath"
	"testing"
)

// requestDirsLeft lists the directories of requests left under the state
// dir's run/*/req/: every one holding anything but an empty tmp/. A directory
// made ahead of demand holds only that; a request's has at least what its child
// made (stdout and stderr, from the step before its event is read) or, for an
// event over 32 KiB, the supervisor's event.json (a small event travels in go,
// so event.json alone no longer tells a request's directory). A directory whose
// child died before making anything is not told from one made ahead.
func requestDirsLeft(t *testing.T, stateDir string) []string {
	t.Helper()
	var left []string
	zs, _ := os.ReadDir(filepath.Join(stateDir, "run"))
	for _, z := range zs {
		req := filepath.Join(stateDir, "run", z.Name(), "req")
		rs, _ := os.ReadDir(req)
		for _, r := range rs {
			if usedRequestDir(filepath.Join(req, r.Name())) {
				left = append(left, filepath.Join(z.Name(), r.Name()))
			}
		}
	}
	return left
}

// usedRequestDir reports whether the request directory dir holds anything
// but an empty tmp/ (requestDirsLeft).
func usedRequestDir(dir string) bool {
	names, err := os.ReadDir(dir)
	if err != nil {
		return false // removed meanwhile
	}
	for _, n := range names {
		if n.Name() != "tmp" {
			return true
		}
		if inside, err := os.ReadDir(filepath.Join(dir, "tmp")); err == nil && len(inside) > 0 {
			return true
		}
	}
	return false
}

// unixHTTP returns an http.Client that dials the daemon's socket.
func unixHTTP(d *Daemon) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", daemon.SocketPath(d.StateDir))
	}}}
}

func execZygo(args ...string) *exec.Cmd { return exec.Command(zygoBin, args...) }

// readProcessMemory returns the concatenated readable, private or anonymous
// mappings of pid (via /proc/pid/maps and /proc/pid/mem).
func readProcessMemory(t *testing.T, pid int) []byte {
	t.Helper()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	var out []byte
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[1][0] != 'r' {
			continue
		}
		if len(f) >= 6 && (strings.HasPrefix(f[5], "/usr") || f[5] == "[vvar]" || f[5] == "[vsyscall]") {
			continue
		}
		var lo, hi uint64
		fmt.Sscanf(f[0], "%x-%x", &lo, &hi)
		buf := make([]byte, hi-lo)
		n, _ := mem.ReadAt(buf, int64(lo))
		out = append(out, buf[:n]...)
	}
	return out
}

func execCmd(name string, args ...string) error { return exec.Command(name, args...).Run() }

func toString(v any) string { b, _ := json.Marshal(v); return string(b) }
