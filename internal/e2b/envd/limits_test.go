package envd

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	fspb "github.com/zygo-run/zygo/internal/e2b/envd/spec/filesystem"
	pb "github.com/zygo-run/zygo/internal/e2b/envd/spec/process"
)

// lazyBody yields a JSON Stat request of n bytes without holding it: {"path":"/aaa...a"}.
type lazyBody struct{ left, n int }

func (b *lazyBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	i := 0
	for ; i < len(p) && b.left > 0; i++ {
		switch pos := b.n - b.left; {
		case pos < 10:
			p[i] = `{"path":"/`[pos]
		case b.left <= 2:
			p[i] = `"}`[2-b.left]
		default:
			p[i] = 'a'
		}
		b.left--
	}
	return i, nil
}

// vmHWM is this process's peak resident set, in KiB (/proc/self/status).
func vmHWM(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kib
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// H1 of issue 19: a caller without the access token makes the daemon read nothing of its
// body, however large and however many at once.
func TestUnauthenticatedBodiesAreNotRead(t *testing.T) {
	h := newHarness(t)
	h.fake.token = "secret"
	const (
		calls = 16
		size  = 30 << 20
	)
	before := vmHWM(t)
	var wg sync.WaitGroup
	statuses := make([]int, calls)
	for i := range calls {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctxT(t), "POST", h.srv.URL+"/filesystem.Filesystem/Stat", &lazyBody{left: size, n: size})
			if err != nil {
				t.Error(err)
				return
			}
			req.ContentLength = size
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(HeaderSandboxID, fakeID)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return // the server answered and closed before the body was sent: allowed
			}
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			statuses[i] = res.StatusCode
		})
	}
	wg.Wait()
	got401 := 0
	for _, st := range statuses {
		switch st {
		case 0:
		case http.StatusUnauthorized:
			got401++
		default:
			t.Errorf("status %d, want 401", st)
		}
	}
	if got401 == 0 {
		t.Fatal("no call was answered 401")
	}
	if grew := vmHWM(t) - before; grew > 64<<10 {
		t.Fatalf("peak RSS grew by %d MiB for %d unauthenticated %d MiB bodies, want it flat (< 64 MiB)", grew>>10, calls, size>>20)
	}
}

// L1 and L2 of issue 19: unknown fields and unknown enum names are bad input naming them;
// a message over the bound is bad input saying both sizes, not a rate limit.
func TestRPCStrictInput(t *testing.T) {
	h := newHarness(t)
	for body, want := range map[string]string{
		`{"process":{"pid":21},"signal":"SIGNAL_SIGKILL","extra":1}`: `unknown field \"extra\"`,
		`{"process":{"pid":21},"signal":"SIGNAL_BOGUS"}`:             "SIGNAL_BOGUS",
	} {
		st, got := h.do(t, "POST", "/process.Process/SendSignal", "application/json", strings.NewReader(body))
		if st != http.StatusBadRequest || !strings.Contains(got, "invalid_argument") || !strings.Contains(got, want) {
			t.Errorf("%s: %d %s, want 400 invalid_argument naming %s", body, st, got, want)
		}
	}
	big := `{"path":"/` + strings.Repeat("a", maxFilesystemReadBytes) + `"}`
	st, got := h.do(t, "POST", "/filesystem.Filesystem/Stat", "application/json", strings.NewReader(big))
	if st != http.StatusBadRequest || !strings.Contains(got, "invalid_argument") || !strings.Contains(got, strconv.Itoa(maxFilesystemReadBytes)) {
		t.Errorf("oversized Stat: %d %s, want 400 invalid_argument naming the bound", st, got)
	}
	_, err := h.proc.SendSignal(ctxT(t), connect.NewRequest(&pb.SendSignalRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: 1}},
		Signal:  pb.Signal(3),
	}))
	wantCode(t, err, connect.CodeInvalidArgument, "signal 3")
}

// M4 and L7 of issue 19: watches have their own budget, below the guest's stream budget, so
// abandoned polling watchers never lock commands out; each cap's error says what is open
// and how to free it.
func TestWatchBudget(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t)
	var ids []string
	for range maxWatches {
		cw, err := h.fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/home/user"}))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, cw.Msg.GetWatcherId())
	}
	_, err := h.fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/home/user"}))
	wantCode(t, err, connect.CodeResourceExhausted, "16 watches open (0 watchDir streams, 16 polling watchers)")
	wantCode(t, err, connect.CodeResourceExhausted, "RemoveWatcher")
	ws, err := h.fs.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: "/home/user"}))
	if err != nil {
		t.Fatal(err)
	}
	if ws.Receive() {
		t.Fatal("WatchDir past the budget started")
	}
	wantCode(t, ws.Err(), connect.CodeResourceExhausted, "stop a watchDir handle")
	_ = ws.Close()

	// Commands are not held back by the watches.
	stream, err := h.proc.Start(ctx, startReq("echo", "alive"))
	if err != nil {
		t.Fatal(err)
	}
	if _, out, _, _, _ := collect[*pb.StartResponse](t, stream); out != "alive\n" {
		t.Fatalf("a command with every watch slot taken: stdout %q", out)
	}
	// The guest's own budget spent: the error says what this endpoint holds open.
	stream, err = h.proc.Start(ctx, startReq("busy"))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	wantCode(t, stream.Err(), connect.CodeResourceExhausted, "16 watches, at most 16")

	if _, err := h.fs.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: ids[0]})); err != nil {
		t.Fatal(err)
	}
	if _, err := h.fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/home/user"})); err != nil {
		t.Fatalf("CreateWatcher after a RemoveWatcher: %v", err)
	}
}

// L2 of issue 19: a gzip upload cut short is the client's bad input (400 naming the body),
// not the sandbox unavailable; the file is left as it was.
func TestTruncatedGzipUpload(t *testing.T) {
	h := newHarness(t)
	h.fake.files["/z"] = []byte("old")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(bytes.Repeat([]byte("zipped "), 100000))
	_ = zw.Close()
	cut := gz.Bytes()[:gz.Len()/2]
	req, _ := http.NewRequestWithContext(ctxT(t), "POST", h.srv.URL+"/files?path=%2Fz", bytes.NewReader(cut))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Content-Encoding", "gzip")
	res, err := h.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	wantError(t, res.StatusCode, string(b), http.StatusBadRequest, "gzip stream (Content-Encoding: gzip) is cut short")
	if got := string(h.fake.files["/z"]); got != "old" {
		t.Fatalf("file after a cut upload: %q, want it untouched", got)
	}
}
