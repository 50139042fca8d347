package function

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/redact"
)

// BenchmarkRequestBookkeeping is the function package's own work on a warm
// request of examples/stats: its id, its (empty) redactor, and its log rows
// (one printed line and the status line).
func BenchmarkRequestBookkeeping(b *testing.B) {
	d := &deployment{name: "stats", version: "v-3"}
	res := &agentproc.Result{Stdout: []string{"request r-1: 1000 values, mean 0.0123"}, Elapsed: 4321 * time.Microsecond}
	b.ReportAllocs()
	for b.Loop() {
		id := newID("r")
		if r := redact.New(nil); r != nil {
			b.Fatal(r)
		}
		if lines := requestLines(d, id, "", res); len(lines) != 2 {
			b.Fatal(lines)
		}
	}
}

// TestRequestLinesStatus: the status line of a request, as fmt wrote it.
func TestRequestLinesStatus(t *testing.T) {
	d := &deployment{name: "stats", version: "v-3"}
	for _, c := range []struct {
		res    agentproc.Result
		caller string
		want   string
	}{
		{agentproc.Result{Elapsed: 4349 * time.Microsecond}, "", "request r-1 done in 4.3 ms"},
		{agentproc.Result{Elapsed: 4351 * time.Microsecond}, "c-9", "request r-1 done in 4.4 ms (caller id c-9)"},
		{agentproc.Result{Elapsed: 12 * time.Second}, "", "request r-1 done in 12000.0 ms"},
		{agentproc.Result{Failure: agentproc.FailHandler, Error: &agentproc.HandlerError{Type: "ValueError", Message: "no"}, Elapsed: 1500 * time.Microsecond},
			"c-9", "request r-1 failed (handler_error) in 1.5 ms: ValueError: no (caller id c-9)"},
		{agentproc.Result{Failure: agentproc.FailHandler, Elapsed: time.Millisecond}, "", "request r-1 done in 1.0 ms"},
	} {
		lines := requestLines(d, "r-1", c.caller, &c.res)
		last := lines[len(lines)-1]
		if last.Line != c.want || last.Stream != "zygo" || last.CallerID != c.caller {
			t.Errorf("status %+v, want %q", last, c.want)
		}
	}
}

// TestNewIDForm: a request id is PREFIX-MILLIS-RANDOM, hex.
func TestNewIDForm(t *testing.T) {
	before := time.Now().UnixMilli()
	id := newID("r")
	var ms int64
	var rnd string
	if n, err := fmt.Sscanf(strings.ReplaceAll(id, "-", " "), "r %x %s", &ms, &rnd); n != 2 || err != nil || ms < before || len(rnd) != 12 ||
		id != fmt.Sprintf("r-%x-%s", ms, rnd) {
		t.Errorf("id %q: want r-<hex millis>-<12 hex digits>", id)
	}
}
