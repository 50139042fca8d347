package zygo

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// newTestClient serves canned answers by "METHOD PATH".
func newTestClient(t *testing.T, answers map[string]func(w http.ResponseWriter)) *Client {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, ok := answers[r.Method+" "+r.URL.Path]; ok {
			h(w)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error": {"code": "not_found", "message": "no route"}}`))
	}))
	t.Cleanup(ts.Close)
	return NewTCPClient(strings.TrimPrefix(ts.URL, "http://"), "")
}

func answer(status int, body string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.WriteHeader(status)
		w.Write([]byte(body))
	}
}

func TestErrors(t *testing.T) {
	c := newTestClient(t, map[string]func(http.ResponseWriter){
		"GET /v1/sandboxes/x": answer(503, `{"error": {"code": "unavailable", "message": "runsc not found (install it with scripts/install-runsc.sh)"}}`),
	})
	_, err := c.Get(context.Background(), "x")
	var ae *Error
	if !IsUnavailable(err) || !strings.Contains(err.Error(), "install-runsc") || !errors.As(err, &ae) || ae.Status != 503 {
		t.Errorf("503: %#v", err)
	}
	_, err = c.Get(context.Background(), "y")
	if !IsNotFound(err) {
		t.Errorf("404: %v", err)
	}
}

func TestExecStream(t *testing.T) {
	c := newTestClient(t, map[string]func(http.ResponseWriter){
		"POST /v1/sandboxes/sb-1/exec": answer(200, `{"stream": "stdout", "data": "aGk="}
{"stream": "stderr", "data": "ZXJy"}
{"exit": {"code": 7}}
`),
		"POST /v1/sandboxes/sb-2/exec": answer(200, `{"stream": "stdout", "data": "aGk="}
{"error": {"code": "unavailable", "message": "guest went away"}}
`),
	})
	var out strings.Builder
	res, err := c.Sandbox("sb-1").Exec(context.Background(), []string{"x"}, &ExecOptions{Stdout: &out})
	if err != nil || res.ExitCode != 7 || string(res.Stdout) != "hi" || string(res.Stderr) != "err" || out.String() != "hi" {
		t.Errorf("exec: %+v %v %q", res, err, out.String())
	}
	if _, err := c.Sandbox("sb-2").Exec(context.Background(), []string{"x"}, nil); !IsUnavailable(err) {
		t.Errorf("error event: %v", err)
	}
}

func TestFork(t *testing.T) {
	c := newTestClient(t, map[string]func(http.ResponseWriter){
		"POST /v1/sandboxes/part/fork": answer(200, `{"checkpoint": {"id": "cp-1"}, "children": [
			{"index": 0, "sandbox": {"id": "sb-a", "generation": "g1"}},
			{"index": 1, "error": {"code": "unavailable", "message": "reseal timed out"}}], "succeeded": 1, "failed": 1}`),
		"POST /v1/sandboxes/none/fork": answer(503, `{"error": {"code": "unavailable", "message": "every child failed"},
			"checkpoint": {"id": "cp-1"}, "children": [{"index": 0, "error": {"code": "unavailable", "message": "x"}}]}`),
		"POST /v1/sandboxes/bad/fork": answer(400, `{"error": {"code": "bad_request", "message": "fork n=0: must be between 1 and 16"}}`),
	})
	ctx := context.Background()
	res, err := c.Sandbox("part").Fork(ctx, 2, "")
	if err != nil || len(res.Children) != 2 || len(res.Running()) != 1 || res.Running()[0].ID != "sb-a" ||
		!IsUnavailable(res.Children[1].Err) || res.Checkpoint.ID != "cp-1" {
		t.Errorf("partial fork: %+v %v", res, err)
	}
	if res.Running()[0].c != c {
		t.Errorf("a child cannot be used: no client")
	}
	res, err = c.Sandbox("none").Fork(ctx, 1, "")
	if !IsUnavailable(err) || len(res.Children) != 1 || res.Children[0].Err == nil {
		t.Errorf("all failed: %+v %v", res, err)
	}
	if _, err := c.Sandbox("bad").Fork(ctx, 0, ""); !IsBadRequest(err) || !strings.Contains(err.Error(), "16") {
		t.Errorf("bad n: %v", err)
	}
}

// TestTCPToken checks that a TCP client sends its token on every call (Fork builds its own
// request) and that the daemon's 401 is IsUnauthenticated.
func TestTCPToken(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer t0k" {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error": {"code": "unauthenticated", "message": "this API listener requires a bearer token"}}`))
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"error": {"code": "bad_request", "message": "past the token"}}`))
	}))
	t.Cleanup(ts.Close)
	addr := strings.TrimPrefix(ts.URL, "http://")
	ctx := context.Background()
	for _, c := range []struct {
		token string
		want  func(error) bool
	}{{"", IsUnauthenticated}, {"wrong", IsUnauthenticated}, {"t0k", IsBadRequest}} {
		cl := NewTCPClient(addr, c.token)
		if _, err := cl.Get(ctx, "x"); !c.want(err) {
			t.Errorf("token %q: Get = %v", c.token, err)
		}
		if _, err := cl.Sandbox("x").Fork(ctx, 1, ""); !c.want(err) {
			t.Errorf("token %q: Fork = %v", c.token, err)
		}
	}
}

func TestCreateSendsSecretNames(t *testing.T) {
	var body string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body = string(b)
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"error": {"code": "bad_request", "message": "invalid argument: secrets: unknown secret \"NOPE\" (set it with ` + "`zygo secret set NOPE`" + `)"}}`))
	}))
	defer ts.Close()
	c := NewTCPClient(strings.TrimPrefix(ts.URL, "http://"), "")
	_, err := c.Create(context.Background(), CreateOptions{Name: "a", Secrets: []string{"API_KEY", "NOPE"}})
	if body != `{"name":"a","secrets":["API_KEY","NOPE"]}` {
		t.Errorf("body %s", body)
	}
	if !IsBadRequest(err) || !strings.Contains(err.Error(), `unknown secret "NOPE"`) {
		t.Errorf("unknown secret: %v", err)
	}
}
