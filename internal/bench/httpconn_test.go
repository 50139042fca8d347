package bench

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// serveUnix serves h on a unix socket in a temporary directory (a stand-in
// for the daemon's API socket) and returns its path.
func serveUnix(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func TestInvokeOnReadsEveryAnswer(t *testing.T) {
	var n atomic.Int64
	sock := serveUnix(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/functions/stats/invoke" {
			http.Error(w, "wrong request "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		child := "preforked"
		if n.Add(1)%2 == 0 {
			child = "forked"
		}
		w.Header().Set(wire.ChildHeader, child)
		w.Header().Set(wire.ServerTimingHeader, string(wire.AppendServerTiming(nil, "wait", 2*time.Millisecond)))
		w.Write([]byte(`{"n": 100}` + "\n"))
	})
	lat, steps, forked, wall, err := invokeOn(context.Background(), sock, "stats", `{"n": 100}`, 10, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n.Load() != 10 || len(lat) != 10 || wall <= 0 {
		t.Fatalf("%d requests served, %d latencies, wall %v; want 10, 10, > 0", n.Load(), len(lat), wall)
	}
	if got := share(forked); got != 0.5 {
		t.Errorf("forked share %.2f, want 0.50 (every second answer said forked)", got)
	}
	for i, s := range steps {
		if len(s) != 1 || s[0].Name != "wait" || s[0].Dur != 2*time.Millisecond {
			t.Errorf("request %d: steps %v, want [wait 2ms]", i, s)
		}
		if lat[i] <= 0 {
			t.Errorf("request %d: latency %v", i, lat[i])
		}
	}
}

func TestInvokeOnReportsAFailedAnswer(t *testing.T) {
	sock := serveUnix(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"code":"crashed"}`, http.StatusInternalServerError)
	})
	_, _, _, _, err := invokeOn(context.Background(), sock, "stats", `{}`, 4, 2, 0)
	if err == nil || !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), "crashed") {
		t.Fatalf("err = %v, want the status and the body", err)
	}
}

func TestInvokeOnStopsWhenTheContextEnds(t *testing.T) {
	sock := serveUnix(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(50 * time.Millisecond)
		w.Write([]byte("{}\n"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, _, _, _, err := invokeOn(ctx, sock, "stats", `{}`, 200, 2, 0)
	if took := time.Since(t0); took > 2*time.Second {
		t.Fatalf("invokeOn returned after %v; the context ended at 120ms", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	// A paced series stops in its pause too.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	t0 = time.Now()
	_, _, _, _, err = invokeOn(ctx2, sock, "stats", `{}`, 5, 1, time.Hour)
	if took := time.Since(t0); took > 2*time.Second || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("paced: returned after %v with %v, want soon after 100ms with DeadlineExceeded", took, err)
	}
}

func TestInvokeOnStopsAtTheFirstFailure(t *testing.T) {
	var n atomic.Int64
	sock := serveUnix(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			http.Error(w, `{"code":"crashed"}`, http.StatusInternalServerError)
			return
		}
		w.Write([]byte("{}\n"))
	})
	// Paced: the series must not go on pausing between requests it will not make.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	_, _, _, _, err := invokeOn(ctx, sock, "stats", `{}`, 40, 1, 25*time.Millisecond)
	if took := time.Since(t0); took > 500*time.Millisecond {
		t.Errorf("returned after %v; the first request failed at once", took)
	}
	if err == nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("err = %v, want the first request's 500", err)
	}
	if n.Load() > 2 {
		t.Errorf("%d requests served after the first failed", n.Load()-1)
	}
}

func TestInvokeConnEndsWithItsContext(t *testing.T) {
	sock := serveUnix(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Second)
		w.Write([]byte("{}\n"))
	})
	ctx, cancel := context.WithCancel(context.Background())
	c, err := dialInvoke(ctx, sock, "stats", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.AfterFunc(50*time.Millisecond, cancel)
	t0 := time.Now()
	_, err = c.Do() // in flight when the context ends
	if took := time.Since(t0); took > 500*time.Millisecond || !errors.Is(err, context.Canceled) {
		t.Fatalf("in flight: returned after %v with %v, want soon after 50ms with context.Canceled", took, err)
	}
	if _, err = c.Do(); !errors.Is(err, context.Canceled) { // and after it
		t.Fatalf("after: %v, want context.Canceled", err)
	}
}
