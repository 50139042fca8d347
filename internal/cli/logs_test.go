package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// The flags of zygo logs make the first query: --since as a duration or a time, --tail from
// the end, -f alone from the end; a bad value names its flag.
func TestLogsFlags(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	q, err := logsOptions{since: "10m", tail: -1}.query(now)
	if err != nil || !q.Since.Equal(now.Add(-10*time.Minute)) || q.FromEnd {
		t.Errorf("--since 10m: %+v %v", q, err)
	}
	q, err = logsOptions{since: "2026-12-01T00:00:00Z", tail: 5, follow: true}.query(now)
	if err != nil || q.Since.Day() != 1 || !q.FromEnd || q.Tail != 5 {
		t.Errorf("--since TIME --tail 5 -f: %+v %v", q, err)
	}
	if q, _ = (logsOptions{follow: true, tail: -1}).query(now); !q.FromEnd || q.Tail != 0 {
		t.Errorf("-f alone does not start at the end: %+v", q)
	}
	if q, _ = (logsOptions{follow: true, tail: -1, request: "r-1"}).query(now); q.FromEnd {
		t.Errorf("-f --request starts at the end, skipping the request's lines: %+v", q)
	}
	for _, o := range []logsOptions{{since: "yesterday", tail: -1}, {since: "-5m", tail: -1}} {
		if _, err := o.query(now); err == nil || !strings.HasPrefix(err.Error(), "--since ") {
			t.Errorf("--since %q: %v, want an error naming --since", o.since, err)
		}
	}
	for _, n := range []int{-2, wire.MaxLogsLimit + 1} {
		if _, err := (logsOptions{tail: n}).query(now); err == nil || !strings.HasPrefix(err.Error(), "--tail ") {
			t.Errorf("--tail %d: %v, want an error naming --tail", n, err)
		}
	}
}

// Each line starts with its time in RFC 3339, UTC, to the millisecond.
func TestPrintLogsDates(t *testing.T) {
	var b bytes.Buffer
	at := time.Date(2026, 12, 2, 4, 5, 6, 789e6, time.FixedZone("CET", 3600))
	printLogs(&b, wire.LogsBody{Lines: []wire.LogLine{{At: at, RequestID: "r-1", Stream: "stdout", Line: "hi"}}}, false)
	if got := b.String(); got != "2026-12-02T03:05:06.789Z r-1 stdout hi\n" {
		t.Errorf("line %q", got)
	}
}

// A bad --log-format or --log-level is refused naming the flag.
func TestDaemonLoggerFlags(t *testing.T) {
	var b bytes.Buffer
	log, err := newDaemonLogger(&b, "json", "debug")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hello", "k", 1)
	if !strings.HasPrefix(b.String(), `{"time":`) || !strings.Contains(b.String(), `"msg":"hello"`) {
		t.Errorf("json debug record %q", b.String())
	}
	if _, err := newDaemonLogger(&b, "xml", "info"); err == nil || !strings.HasPrefix(err.Error(), "--log-format ") {
		t.Errorf("--log-format xml: %v", err)
	}
	if _, err := newDaemonLogger(&b, "text", "loud"); err == nil || !strings.HasPrefix(err.Error(), "--log-level ") {
		t.Errorf("--log-level loud: %v", err)
	}
}

// A line's control characters are shown, not sent to the terminal: output cannot forge a line
// of another request or move the cursor.
func TestPrintLogsEscapesControls(t *testing.T) {
	var b bytes.Buffer
	line := "ok\x1b]0;owned\x07\r2026-01-01T00:00:00.000Z r-9 zygo forged\x1b[2K\u009b\tend"
	if err := printLogs(&b, wire.LogsBody{Lines: []wire.LogLine{{RequestID: "r-1", Stream: "stdout", Line: line}}}, false); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	if strings.ContainsAny(got[:len(got)-1], "\x1b\x07\r\u009b") {
		t.Errorf("control characters reached the terminal: %q", got)
	}
	if !strings.Contains(got, `ok\x1b]0;owned\x07\x0d2026`) || !strings.Contains(got, `\u009b`) || !strings.Contains(got, "\tend") {
		t.Errorf("printed %q", got)
	}
}
