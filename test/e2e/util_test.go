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

// requestDirsLeft lists the directories of requests (those holding an
// event) still on the host under every zygote's run dir.
func requestDirsLeft(t *testing.T, stateDir string) []string {
	t.Helper()
	var left []string
	zs, _ := os.ReadDir(filepath.Join(stateDir, "run"))
	for _, z := range zs {
		rs, _ := os.ReadDir(filepath.Join(stateDir, "run", z.Name(), "req"))
		for _, r := range rs {
			// Empty directories made ahead of demand (no event yet) belong to
			// no request.
			if _, err := os.Stat(filepath.Join(stateDir, "run", z.Name(), "req", r.Name(), "event.json")); err == nil {
				left = append(left, filepath.Join(z.Name(), r.Name()))
			}
		}
	}
	return left
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
