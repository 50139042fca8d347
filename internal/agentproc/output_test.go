package agentproc

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/zygo-run/zygo/internal/redact"
)

// checkBounded fails unless lines hold at most maxLogLines lines of at most
// maxLogPiece bytes (maxLogBytes in all) and then one note saying what was
// dropped.
func checkBounded(t *testing.T, lines []string) {
	t.Helper()
	if len(lines) == 0 || len(lines) > maxLogLines+1 {
		t.Fatalf("%d lines kept, want 1..%d", len(lines), maxLogLines+1)
	}
	var total int
	for _, l := range lines[:len(lines)-1] {
		if len(l) > maxLogPiece {
			t.Fatalf("a line of %d bytes kept", len(l))
		}
		total += len(l)
	}
	if total > maxLogBytes {
		t.Fatalf("%d bytes kept", total)
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, "truncated") || !strings.Contains(last, "dropped") {
		t.Fatalf("no note of what was dropped: last line %q", last)
	}
}

// TestReadLinesBoundsLinesAndBytes: a stream of newlines, of one huge line
// and of many short lines each keeps at most maxLogLines lines and
// maxLogBytes bytes, and says what it dropped.
func TestReadLinesBoundsLinesAndBytes(t *testing.T) {
	for what, data := range map[string][]byte{
		"newlines":    bytes.Repeat([]byte("\n"), 2<<20),
		"one line":    bytes.Repeat([]byte("x"), 2<<20),
		"short lines": bytes.Repeat([]byte("0123456789\n"), 200_000),
	} {
		t.Run(strings.ReplaceAll(what, " ", "_"), func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "stdout"), data, 0o600); err != nil {
				t.Fatal(err)
			}
			lines := readLines(context.Background(), openDir(t, dir), "stdout", nil)
			checkBounded(t, lines)
			if !strings.Contains(lines[len(lines)-1], "2") { // the byte count written
				t.Fatalf("note %q", lines[len(lines)-1])
			}
		})
	}
}

// TestReadLinesRedactsTheWholeStream: a secret value straddling any cut
// (a line piece, the byte budget) and a value holding a newline are
// replaced whole; no part of either reaches a line.
func TestReadLinesRedactsTheWholeStream(t *testing.T) {
	secret := "S3CR3T-VALUE-abc123xyz"
	pem := "-----BEGIN KEY-----\nS3CR3T-line-two\n-----END KEY-----"
	r := redact.New(map[string][]byte{"APIKEY": []byte(secret), "PEM": []byte(pem)})
	cases := map[string]string{
		"piece cut":  strings.Repeat("A", maxLogPiece-10) + secret + "\n",
		"64 KiB cut": strings.Repeat("A", 65536-10) + secret + "\n",
		"byte cut":   strings.Repeat("A", maxLogBytes-10) + secret + "\nmore\n",
		"newline":    "key:\n" + pem + "\nplain " + secret + "\n",
	}
	for what, data := range cases {
		t.Run(strings.ReplaceAll(what, " ", "_"), func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "stdout"), []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			lines := readLines(context.Background(), openDir(t, dir), "stdout", r)
			joined := strings.Join(lines, "") // a value split in two pieces would show joined
			for _, part := range []string{"S3CR", "3T-V", "VALUE", "abc123", "xyz", "line-two"} {
				if strings.Contains(joined, part) {
					t.Fatalf("%q of a secret reached the lines", part)
				}
			}
			if !strings.Contains(joined, "[redacted:") {
				t.Fatal("no redaction marker")
			}
		})
	}
}

// TestPumpLinesBoundsAndRedacts: what a worker writes to its own fds after
// GO is its request's, bounded and redacted as one text and handed over in
// one batch; the zygote's own output before it is bounded over its life.
func TestPumpLinesBoundsAndRedacts(t *testing.T) {
	secret := "S3CR3T-VALUE-abc123xyz"
	var mu sync.Mutex
	got := map[string][]string{} // request id → lines
	calls := 0
	z := &Process{spec: Spec{Output: func(req, stream string, lines []string) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		got[req] = append(got[req], lines...)
	}}}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() { z.pumpLines("stdout", pr); close(done) }()
	// The zygote's own flood: bounded, noted.
	pw.Write(bytes.Repeat([]byte("\n"), 1<<20))
	pw.Write([]byte("import done"))
	// GO: the request owns the rest.
	z.current.Store(&outputOwner{id: "r1", redact: redact.New(map[string][]byte{"K": []byte(secret)})})
	pw.Write([]byte("\n" + strings.Repeat("A", 65536-10) + secret[:8]))
	pw.Write([]byte(secret[8:] + "\n"))
	pw.Write(bytes.Repeat([]byte("\n"), 2<<20))
	pw.Close()
	<-done
	own := got[""]
	if len(own) > maxLogLines+2 || !strings.Contains(own[len(own)-1], "dropped") {
		t.Fatalf("the zygote's own output: %d lines, last %q", len(own), own[len(own)-1])
	}
	req := got["r1"]
	checkBounded(t, req)
	joined := strings.Join(req, "\n") // a piece never cuts a marker
	if strings.Contains(joined, "S3CR") || strings.Contains(joined, "xyz") || !strings.Contains(joined, "[redacted:K]") {
		t.Fatal("the request's output was not redacted as one text")
	}
	if calls > 2*maxLogLines {
		t.Fatalf("%d calls of Output", calls)
	}
}
