package api_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/secret"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// socketDir returns a short directory for a unix socket (sun_path holds
// 108 bytes; t.TempDir's names can be longer), removed when the test ends.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "zygo-api-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serveUnix serves h on a unix socket and returns a client for it.
func serveUnix(t *testing.T, h http.Handler) *zygo.Client {
	t.Helper()
	sock := filepath.Join(socketDir(t), "zygo.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return zygo.NewClient(sock)
}

func TestClientUnreachable(t *testing.T) {
	ctx := context.Background()
	dir := socketDir(t)

	// A socket file nobody listens on: bound, never listening.
	refused := filepath.Join(dir, "refused.sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: refused}); err != nil {
		t.Fatal(err)
	}

	for _, sock := range []string{filepath.Join(dir, "missing.sock"), refused} {
		c := zygo.NewClient(sock)
		_, err := c.Status(ctx)
		var un *zygo.Unreachable
		if !errors.As(err, &un) {
			t.Errorf("%s: Status = %v (%T), want *zygo.Unreachable", filepath.Base(sock), err, err)
			continue
		}
		if !strings.Contains(err.Error(), "zygo serve") {
			t.Errorf("%s: message %q does not say how to start a daemon", filepath.Base(sock), err)
		}
		if un.Unwrap() == nil {
			t.Errorf("%s: Unreachable wraps nothing", filepath.Base(sock))
		}
		var ae *zygo.Error
		if errors.As(err, &ae) {
			t.Errorf("%s: transport failure reported as an API error %+v", filepath.Base(sock), ae)
		}
	}
}

func TestClientAgainstServer(t *testing.T) {
	ctx := context.Background()
	f := newFixture()
	c := serveUnix(t, f.h)

	st, err := c.Status(ctx)
	if err != nil || st.Version != "test-version" || st.Functions != 2 {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	list, err := c.Functions(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "hello" {
		t.Errorf("List = %+v, %v", list, err)
	}

	t.Run("4xx is an *Error with the body", func(t *testing.T) {
		f.fns.err = fmt.Errorf("function %q: %w", "nope", errdefs.ErrNotFound)
		defer func() { f.fns.err = nil }()
		err := c.RemoveFunction(ctx, "nope")
		var ae *zygo.Error
		if !errors.As(err, &ae) {
			t.Fatalf("Remove = %v (%T), want *zygo.Error", err, err)
		}
		// The body's message is the sentence, the category once as its predicate; the
		// client's error text is that message as sent.
		if ae.Status != 404 || ae.Code != "not_found" || ae.Message != `function "nope" not found` {
			t.Errorf("Error = %+v", ae)
		}
		if got := err.Error(); got != ae.Message {
			t.Errorf("Error() = %q, want the message as sent", got)
		}
		if !zygo.IsNotFound(err) {
			t.Error("IsNotFound = false for a 404")
		}
	})

	t.Run("invoke", func(t *testing.T) {
		f.fns.inv = &function.Invocation{RequestID: "r-1", Value: []byte(`{"ok":true}`)}
		res, err := c.Invoke(ctx, "hello", []byte(`{"x":1}`))
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Value) != `{"ok":true}` || res.RequestID != "r-1" || res.Elapsed <= 0 {
			t.Errorf("Invoke = %+v", res)
		}
		if last := f.fns.events[len(f.fns.events)-1]; string(last) != `{"x":1}` {
			t.Errorf("server got event %q", last)
		}
	})

	t.Run("failed invoke carries the handler's error", func(t *testing.T) {
		f.fns.inv = &function.Invocation{RequestID: "r-2", Failure: agentproc.FailHandler,
			Error: &agentproc.HandlerError{Type: "KeyError", Message: "'name'", Traceback: "Traceback:\n  line 3"}}
		_, err := c.Invoke(ctx, "hello", []byte(`{}`))
		var ae *zygo.Error
		if !errors.As(err, &ae) {
			t.Fatalf("Invoke = %v, want *zygo.Error", err)
		}
		if ae.Status != 500 || ae.Code != "handler_error" || ae.Type != "KeyError" || ae.RequestID != "r-2" {
			t.Errorf("Error = %+v", ae)
		}
		if err.Error() != "'name'\nTraceback:\n  line 3" {
			t.Errorf("Error() = %q, want the message then the traceback", err.Error())
		}
		if zygo.IsNotFound(err) {
			t.Error("IsNotFound = true for a 500")
		}
	})

	t.Run("deploy packs the directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "zygo.toml"), []byte("name = \"hello\"\nruntime = \"python\"\nhandler = \"main:handler\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "main.py"), []byte("def handler(e, c): return e\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := c.DeployDir(ctx, dir)
		if err != nil || res.Name != "hello" {
			t.Fatalf("Deploy = %+v, %v", res, err)
		}
		u, err := function.ReadBundle(bytes.NewReader(f.fns.deployBody))
		if err != nil {
			t.Fatalf("the server received a bundle ReadBundle refuses: %v", err)
		}
		if len(u.Files) != 2 || u.Manifest.Name != "hello" {
			t.Errorf("bundle files %+v", u.Files)
		}
	})

	t.Run("logs query", func(t *testing.T) {
		if _, err := c.Logs(ctx, "hello", zygo.LogsQuery{RequestID: "r-7", After: 12}); err != nil {
			t.Fatal(err)
		}
		if q := f.logs.q; q == nil || q.Function != "hello" || q.RequestID != "r-7" || q.AfterID != 12 {
			t.Errorf("server got query %+v", q)
		}
	})

	t.Run("secrets", func(t *testing.T) {
		if err := c.SetSecret(ctx, "TOKEN", []byte("t0k3n")); err != nil {
			t.Fatal(err)
		}
		if string(f.secrets.set["TOKEN"]) != "t0k3n" {
			t.Errorf("server stored %q", f.secrets.set["TOKEN"])
		}
		if err := c.RemoveSecret(ctx, "TOKEN"); err != nil {
			t.Fatal(err)
		}
		if len(f.secrets.remove) != 1 || f.secrets.remove[0] != "TOKEN" {
			t.Errorf("server removed %q", f.secrets.remove)
		}
		f.secrets.metas = []secret.Meta{{Name: "A"}, {Name: "B"}}
		if ms, err := c.ListSecrets(ctx); err != nil || len(ms) != 2 || ms[1].Name != "B" {
			t.Errorf("ListSecrets = %+v, %v", ms, err)
		}
	})
}

// A failure from something that is not the API (a proxy, a crash page)
// still becomes an *Error, with the status and the body text.
func TestClientNonJSONError(t *testing.T) {
	c := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream exploded", http.StatusBadGateway)
	}))
	_, err := c.Status(context.Background())
	var ae *zygo.Error
	if !errors.As(err, &ae) {
		t.Fatalf("Status = %v, want *zygo.Error", err)
	}
	if ae.Status != 502 || ae.Code != "http" || ae.Message != "HTTP 502: upstream exploded" {
		t.Errorf("Error = %+v", ae)
	}
}
