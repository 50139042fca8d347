package api

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// discard is a ResponseWriter that keeps its header and drops the body.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkAnswerRequest writes the answer of a warm request of
// examples/stats: its headers (Server-Timing of 25 steps) and value.
func BenchmarkAnswerRequest(b *testing.B) {
	names := []string{"dir", "fork+hello", "before_go", "go", "wait", "result", "settle", "child.pre.fdreset", "child.pre.privatise",
		"child.pre.reseed", "child.pre.rehearse", "child.close_socket", "child.stdio", "child.fdreset", "child.privatise", "child.reseed",
		"child.tmpdir", "child.dumpable", "child.landlock", "child.atexit_clear", "child.event", "child.handler", "child.encode",
		"child.atexit+flush", "collect"}
	phases := make([]agentproc.Phase, len(names))
	for i, n := range names {
		phases[i] = agentproc.Phase{Name: n, Took: time.Duration(i*37+11) * time.Microsecond}
	}
	r := ranRequest{id: "r-19abc-0123456789ab", child: agentproc.ChildPreForked, elapsed: 4321 * time.Microsecond, phases: phases,
		value: []byte(`{"n": 1000, "mean": -0.0126, "std": 1.0044, "weighted": -7.26, "draw": 2780345106219468441}`)}
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		answerRequest(w, r)
	}
}

// TestAnswerRequestHeaderKeysAreCanonical: answerRequest stores its headers
// under their keys as given, which is right only for canonical keys.
func TestAnswerRequestHeaderKeysAreCanonical(t *testing.T) {
	for _, k := range []string{wire.RequestIDHeader, wire.ChildHeader, wire.DurationHeader, wire.ServerTimingHeader} {
		if c := http.CanonicalHeaderKey(k); c != k {
			t.Errorf("header %q is not canonical (%q)", k, c)
		}
	}
	w := &discard{h: http.Header{}}
	answerRequest(w, ranRequest{id: "r-1", child: agentproc.ChildForked, elapsed: 1234567 * time.Nanosecond,
		phases: []agentproc.Phase{{Name: "dir", Took: 41 * time.Microsecond}, {Name: "child.handler", Took: 1200 * time.Microsecond}}})
	want := http.Header{"X-Zygo-Request-Id": {"r-1"}, "X-Zygo-Child": {"forked"}, "X-Zygo-Duration-Ms": {"1.23"},
		"Server-Timing": {"dir;dur=0.041, child.handler;dur=1.200"}, "Content-Type": {"application/json"}}
	if !reflect.DeepEqual(w.h, want) {
		t.Errorf("headers %v, want %v", w.h, want)
	}
}
