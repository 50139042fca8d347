package api_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/api"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// catManager is the daemon's sandbox manager reduced to an Exec that behaves as cat.
type catManager struct{ api.Sandboxes }

func (catManager) Exec(_ context.Context, _ string, req guest.ExecRequest, stdout, _ io.Writer) (guest.ExitStatus, error) {
	if req.Stdin == nil {
		return guest.ExitStatus{Code: 9}, nil
	}
	_, err := io.Copy(stdout, req.Stdin)
	return guest.ExitStatus{}, err
}

type sdkWaitBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *sdkWaitBuf) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *sdkWaitBuf) waitFor(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		w.mu.Lock()
		got := w.b.String()
		w.mu.Unlock()
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("output %q, want %q", got, want)
		}
	}
}

// The SDK against the daemon's real exec handler: ExecOptions.Stdin is streamed (the second line is
// written only after the first came back), and its EOF ends the command.
func TestExecStdinStreams(t *testing.T) {
	srv := api.NewServer(nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), "test").WithSandboxes(catManager{}, nil)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	sb := zygo.NewTCPClient(strings.TrimPrefix(ts.URL, "http://"), "").Sandbox("sb-1")
	ctx := context.Background()

	pr, pw := io.Pipe()
	out := &sdkWaitBuf{}
	done := make(chan error, 1)
	var res zygo.ExecResult
	go func() {
		var err error
		res, err = sb.Exec(ctx, []string{"cat"}, &zygo.ExecOptions{Stdin: pr, Stdout: out})
		done <- err
	}()
	io.WriteString(pw, "one\n")
	out.waitFor(t, "one\n")
	io.WriteString(pw, "two\n")
	out.waitFor(t, "one\ntwo\n")
	pw.Close()
	select {
	case err := <-done:
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "one\ntwo\n" {
			t.Fatalf("exec: %+v %v", res, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("exec did not end after stdin's EOF")
	}

	// No Stdin: the command has none.
	if res, err := sb.Exec(ctx, []string{"cat"}, nil); err != nil || res.ExitCode != 9 {
		t.Fatalf("exec without stdin: %+v %v", res, err)
	}
	// A failing Stdin abandons the call.
	bad := io.MultiReader(strings.NewReader("x"), sdkErrReader{})
	if _, err := sb.Exec(ctx, []string{"cat"}, &zygo.ExecOptions{Stdin: bad}); err == nil {
		t.Fatal("exec with a failing stdin succeeded")
	}
}

type sdkErrReader struct{}

func (sdkErrReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }
