package agentproc

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/untrusted"
)

// statsResult is a result.json as the Python agent writes it for
// examples/stats: the handler's value, then the child's steps.
const statsResult = `{"ok": true, "value": {"n": 1000, "mean": -0.012630480392317568, "std": 1.0044474745470125, "weighted": -7.262911337574004, "draw": 2780345106219468441}, "steps": [["pre.fdreset", 279714], ["pre.privatise", 43129], ["pre.reseed", 786271], ["pre.rehearse", 755102], ["close_socket", 38211], ["stdio", 122030], ["fdreset", 9120], ["privatise", 6032], ["reseed", 202114], ["tmpdir", 49071], ["dumpable", 16384], ["landlock", 122771], ["atexit_clear", 5027], ["event", 54002], ["handler", 905113], ["encode", 31042], ["atexit+flush", 23011]]}`

// BenchmarkReadResult reads and decodes a realistic result.json and turns
// its steps into phases: the daemon's work on a request's outcome.
func BenchmarkReadResult(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "result.json"), []byte(statsResult), 0o600); err != nil {
		b.Fatal(err)
	}
	d, err := untrusted.OpenDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	b.ReportAllocs()
	for b.Loop() {
		rf, err := readResult(context.Background(), d, 1<<20)
		if err != nil || !rf.OK {
			b.Fatal(rf, err)
		}
		if len(rf.Steps.phases()) != 17 {
			b.Fatal(rf.Steps.phases())
		}
	}
}

// BenchmarkDecodeResult is BenchmarkReadResult without the file's read.
func BenchmarkDecodeResult(b *testing.B) {
	data := []byte(statsResult)
	b.ReportAllocs()
	for b.Loop() {
		rf, err := decodeResult(data)
		if err != nil || !rf.OK {
			b.Fatal(rf, err)
		}
		if len(rf.Steps.phases()) != 17 {
			b.Fatal(rf.Steps.phases())
		}
	}
}

// BenchmarkRecv receives the agent's messages of one warm request: the
// child's hello, the zygote's forked and exited.
func BenchmarkRecv(b *testing.B) {
	local, remote := packetPair(b)
	msgs := [][]byte{[]byte(`{"type":"hello","pid":67}`), []byte(`{"type":"forked","seq":12345,"pid":67}`), []byte(`{"type":"exited","seq":12345,"pid":67,"code":0}`)}
	fd := int(remote.Fd())
	b.ReportAllocs()
	for b.Loop() {
		for _, m := range msgs {
			if err := unix.Sendmsg(fd, m, nil, nil, 0); err != nil {
				b.Fatal(err)
			}
			if _, _, err := recv(local); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkSend sends the supervisor's messages of one warm request: fork
// and go.
func BenchmarkSend(b *testing.B) {
	local, remote := packetPair(b)
	buf := make([]byte, maxDatagram)
	fd := int(remote.Fd())
	goMsg := message{Type: "go", RequestID: "r-4f1c2a9b8e7d6c5b", Dir: "/run/zygo/req/0123456789abcdef0123456789abcdef", DeadlineMs: 29998,
		Function: "stats", Version: "v-3", Strict: false}
	b.ReportAllocs()
	for b.Loop() {
		for _, m := range []message{{Type: "fork", Seq: 12345}, goMsg} {
			if err := send(local, m, nil); err != nil {
				b.Fatal(err)
			}
			if _, _, err := unix.Recvfrom(fd, buf, 0); err != nil {
				b.Fatal(err)
			}
		}
	}
}
