package envd

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// These tests speak the wire as the E2B JS SDK does (connect-web with useBinaryFormat
// false: Connect's JSON codec, enveloped for streams), with bodies written by hand from the
// SDK's generated messages, so that a name or shape that drifts from E2B's fails here and
// not only in the end-to-end suite.

// envelope frames one Connect stream message.
func envelope(flags byte, msg string) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// unenvelope splits a Connect stream body into its messages' JSON; the last is the
// end-of-stream message (flag 2).
func unenvelope(t *testing.T, body []byte) (msgs []string, end string) {
	t.Helper()
	for len(body) > 0 {
		if len(body) < 5 {
			t.Fatalf("a cut envelope: %q", body)
		}
		n := binary.BigEndian.Uint32(body[1:5])
		msg := string(body[5 : 5+n])
		if body[0]&2 != 0 {
			end = msg
		} else {
			msgs = append(msgs, msg)
		}
		body = body[5+n:]
	}
	return msgs, end
}

// sameJSON reports whether a and b are the same JSON value (protojson's output varies in
// its spacing on purpose).
func sameJSON(a, b string) bool {
	var va, vb any
	return json.Unmarshal([]byte(a), &va) == nil && json.Unmarshal([]byte(b), &vb) == nil && reflect.DeepEqual(va, vb)
}

func (h *harness) post(t *testing.T, path, contentType string, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctxT(t), "POST", h.srv.URL+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Connect-Timeout-Ms", "60000")
	res, err := h.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func TestWireStartJSON(t *testing.T) {
	h := newHarness(t)
	// commands.run("echo hi") as the SDK sends it (envs {} and no cwd: undefined fields).
	req := `{"process":{"cmd":"echo","args":["hi"],"envs":{}},"stdin":false}`
	st, body := h.post(t, "/process.Process/Start", "application/connect+json", envelope(0, req))
	if st != http.StatusOK {
		t.Fatalf("status %d: %s", st, body)
	}
	msgs, end := unenvelope(t, body)
	want := []string{
		`{"event":{"start":{"pid":101}}}`,
		`{"event":{"data":{"stdout":"aGkK"}}}`,
		`{"event":{"end":{"exited":true,"status":"exit status 0"}}}`,
	}
	if len(msgs) != len(want) || !sameJSON(end, "{}") {
		t.Fatalf("messages:\n%s\nend %s\nwant:\n%s", strings.Join(msgs, "\n"), end, strings.Join(want, "\n"))
	}
	for i := range want {
		if !sameJSON(msgs[i], want[i]) {
			t.Fatalf("message %d = %s, want %s", i, msgs[i], want[i])
		}
	}
	if h.fake.started[0].Stdin {
		t.Fatal(`"stdin":false started the process with stdin`)
	}

	// A failure ends the stream with Connect's error shape, which connect-web maps to a Code.
	st, body = h.post(t, "/process.Process/Start", "application/connect+json", envelope(0, `{"process":{"cmd":"fail"}}`))
	msgs, _ = unenvelope(t, body)
	if st != http.StatusOK || len(msgs) != 3 || !strings.Contains(msgs[2], `"exitCode":3`) || !strings.Contains(msgs[2], `"error":"exit status 3"`) {
		t.Fatalf("fail: %d %q", st, msgs)
	}
	_, body = h.post(t, "/process.Process/Start", "application/connect+json", envelope(0, `{"process":{"cmd":""}}`))
	_, end = unenvelope(t, body)
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(end), &e); err != nil || e.Error.Code != "invalid_argument" || !strings.Contains(e.Error.Message, "process.cmd") {
		t.Fatalf("end of a bad start = %s", end)
	}
}

func TestWireStatJSON(t *testing.T) {
	h := newHarness(t)
	h.fake.files["/home/user/a"] = []byte("x")
	st, body := h.post(t, "/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":"a"}`))
	want := `{"entry":{"name":"a","type":"FILE_TYPE_FILE","path":"/home/user/a","size":"1","mode":420,"permissions":"-rw-r--r--","owner":"user","group":"user","modifiedTime":"2026-12-02T07:00:00Z"}}`
	if st != http.StatusOK || !sameJSON(string(body), want) {
		t.Fatalf("stat: %d\n%s\nwant\n%s", st, body, want)
	}
	st, body = h.post(t, "/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":"nope"}`))
	if st != http.StatusNotFound || !strings.Contains(string(body), `"code":"not_found"`) {
		t.Fatalf("stat of a missing file: %d %s", st, body)
	}
}
