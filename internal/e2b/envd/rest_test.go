package envd

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/zygo-run/zygo/internal/e2b/envd/spec/process"
	"github.com/zygo-run/zygo/internal/errdefs"
)

// do sends a request through the harness's client and returns the status and body.
func (h *harness) do(t *testing.T, method, target, contentType string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, h.srv.URL+target, body)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := h.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, target, err)
	}
	return res.StatusCode, string(b)
}

// wantError fails unless the answer is E2B's error shape with status and a message holding part.
func wantError(t *testing.T, status int, body string, wantStatus int, part string) {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal([]byte(body), &e); err != nil || status != wantStatus || e.Code != wantStatus || !strings.Contains(e.Message, part) {
		t.Fatalf("answer %d %s, want %d {code: %d, message: ...%q...}", status, body, wantStatus, wantStatus, part)
	}
}

// TestHealthFrozen: a guest that does not answer a Stat within healthPing makes /health
// answer 502 (not running), as E2B's does, rather than 204 or a stall.
func TestHealthFrozen(t *testing.T) {
	h := newHarness(t)
	frozen := make(chan struct{})
	defer close(frozen)
	h.fake.mu.Lock()
	h.fake.frozen = frozen
	h.fake.mu.Unlock()
	st, body := h.do(t, "GET", "/health", "", nil)
	wantError(t, st, body, http.StatusBadGateway, "did not answer within")
}

func TestHealth(t *testing.T) {
	h := newHarness(t)
	if st, _ := h.do(t, "GET", "/health", "", nil); st != http.StatusNoContent {
		t.Fatalf("health = %d, want 204", st)
	}
	// The SDK's isRunning reads 502 as "not running", as from E2B's proxy.
	h.hdr.Set(HeaderSandboxID, "gone")
	st, body := h.do(t, "GET", "/health", "", nil)
	wantError(t, st, body, http.StatusBadGateway, "sandbox gone is not running")
	// Without the header, the sandbox may be named by Host: <port>-<id>.<domain>.
	h.hdr.Del(HeaderSandboxID)
	req, _ := http.NewRequestWithContext(ctxT(t), "GET", h.srv.URL+"/health", nil)
	req.Host = "49983-" + fakeID + ".zygo.test"
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("health by Host = %d, want 204", res.StatusCode)
	}
}

func TestOtherPortRefused(t *testing.T) {
	h := newHarness(t)
	h.hdr.Set("E2b-Sandbox-Port", "3000")
	st, body := h.do(t, "GET", "/health", "", nil)
	wantError(t, st, body, http.StatusNotImplemented, `"3000"`)
	h.hdr.Set("E2b-Sandbox-Port", "49999")
	if st, _ := h.do(t, "GET", "/health", "", nil); st != http.StatusNoContent {
		t.Fatalf("health on port 49999 = %d", st)
	}
}

func TestSandboxIDAndRouting(t *testing.T) {
	for _, c := range []struct {
		host, header string
		id           string
		ok           bool
	}{
		{"zygo.test", "sb1", "sb1", true},
		{"49999-sb1.zygo.test:443", "", "sb1", true},
		{"49983-ab_c.d.example", "", "ab_c", true},
		{"3000-sb1.zygo.test", "", "", false},
		{"api.zygo.test", "", "", false},
		{"zygo.test", "bad id!", "bad id!", false},
	} {
		r, _ := http.NewRequest("GET", "http://"+c.host+"/health", nil)
		r.Host = c.host
		if c.header != "" {
			r.Header.Set(HeaderSandboxID, c.header)
		}
		id, ok := SandboxID(r)
		if id != c.id || ok != c.ok || IsEnvdRequest(r) != (c.ok || c.header != "") {
			t.Errorf("SandboxID(host %q, header %q) = %q, %v; want %q, %v", c.host, c.header, id, ok, c.id, c.ok)
		}
	}
}

func TestDownload(t *testing.T) {
	h := newHarness(t)
	h.fake.files["/home/user/f.bin"] = []byte("content\x00\xff")
	st, body := h.do(t, "GET", "/files?path=f.bin&username=user", "", nil)
	if st != http.StatusOK || body != "content\x00\xff" {
		t.Fatalf("download = %d %q", st, body)
	}
	st, body = h.do(t, "GET", "/files?path=%2Fhome%2Fuser%2Fnope", "", nil)
	wantError(t, st, body, http.StatusNotFound, "/home/user/nope")
	st, body = h.do(t, "GET", "/files", "", nil)
	wantError(t, st, body, http.StatusBadRequest, "path is missing")
	st, body = h.do(t, "GET", "/files?path=x&pth=y", "", nil)
	wantError(t, st, body, http.StatusBadRequest, `"pth": unknown`)
	st, body = h.do(t, "GET", "/files?path=x&username=a%20b", "", nil)
	wantError(t, st, body, http.StatusBadRequest, "username")

	// An error after the first byte cuts the body: the client never takes it for the file.
	h.fake.getFault = errors.New("disk gone")
	req, _ := http.NewRequestWithContext(ctxT(t), "GET", h.srv.URL+"/files?path=f.bin", nil)
	// The cut comes before the headers when the first bytes were still buffered.
	if res, err := h.http.Do(req); err == nil {
		defer res.Body.Close()
		if _, err := io.ReadAll(res.Body); err == nil {
			t.Fatal("a download that failed after its first byte read as complete")
		}
	}
}

func TestUpload(t *testing.T) {
	h := newHarness(t)
	// One file, a raw body, to the path parameter (the SDK with envd >= 0.6.0).
	st, body := h.do(t, "POST", "/files?path=dir%2Fraw.txt&username=user", "application/octet-stream", strings.NewReader("raw"))
	if st != http.StatusOK || string(h.fake.files["/home/user/dir/raw.txt"]) != "raw" || h.fake.owners["/home/user/dir/raw.txt"] != "user" {
		t.Fatalf("raw upload = %d %s; files %v", st, body, h.fake.files)
	}
	var entries []uploaded
	if err := json.Unmarshal([]byte(body), &entries); err != nil || len(entries) != 1 || entries[0] != (uploaded{Path: "/home/user/dir/raw.txt", Name: "raw.txt", Type: "file"}) {
		t.Fatalf("answer %s", body)
	}

	// Several files, multipart, each named by its filename (a full path, kept whole).
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for name, content := range map[string]string{"/tmp/a/one.txt": "1", "two.txt": "2"} {
		fw, _ := mw.CreateFormFile("file", name)
		_, _ = fw.Write([]byte(content))
	}
	_ = mw.Close()
	st, body = h.do(t, "POST", "/files?username=root", mw.FormDataContentType(), &buf)
	if st != http.StatusOK || string(h.fake.files["/tmp/a/one.txt"]) != "1" || string(h.fake.files["/root/two.txt"]) != "2" {
		t.Fatalf("multipart upload = %d %s", st, body)
	}

	// One multipart file to the path parameter.
	buf.Reset()
	mw = multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "ignored")
	_, _ = fw.Write([]byte("p"))
	_ = mw.Close()
	if st, body = h.do(t, "POST", "/files?path=%2Fp.txt", mw.FormDataContentType(), &buf); st != http.StatusOK || string(h.fake.files["/p.txt"]) != "p" {
		t.Fatalf("multipart to path = %d %s", st, body)
	}

	// A gzip body (the SDK's gzip option).
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte("zipped"))
	_ = zw.Close()
	req, _ := http.NewRequestWithContext(ctxT(t), "POST", h.srv.URL+"/files?path=%2Fz", &gz)
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Content-Encoding", "gzip")
	res, err := h.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(h.fake.files["/z"]) != "zipped" {
		t.Fatalf("gzip upload = %d, file %q", res.StatusCode, h.fake.files["/z"])
	}
	// File metadata would be dropped: refused, clearly.
	req, _ = http.NewRequestWithContext(ctxT(t), "POST", h.srv.URL+"/files?path=%2Fm", strings.NewReader("m"))
	req.Header.Set("X-Metadata-Owner", "me")
	res, err = h.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	wantError(t, res.StatusCode, string(b), http.StatusNotImplemented, "X-Metadata-Owner")

	st, body = h.do(t, "POST", "/files", "application/octet-stream", strings.NewReader("x"))
	wantError(t, st, body, http.StatusBadRequest, "path is missing")
	buf.Reset()
	mw = multipart.NewWriter(&buf)
	fw, _ = mw.CreateFormField("other")
	_, _ = fw.Write([]byte("x"))
	_ = mw.Close()
	st, body = h.do(t, "POST", "/files?path=x", mw.FormDataContentType(), &buf)
	wantError(t, st, body, http.StatusBadRequest, `"other": want "file"`)
	h.hdr.Set(HeaderSandboxID, "gone")
	st, body = h.do(t, "POST", "/files?path=x", "application/octet-stream", strings.NewReader("x"))
	wantError(t, st, body, http.StatusBadGateway, "not running")
}

// TestHealthWithoutToken: GET /health without a sandbox's access token (missing or wrong)
// answers exactly as for a sandbox that does not exist, so it tells no one without the token
// whether a sandbox of that id or name exists; with the token it answers 204.
func TestHealthWithoutToken(t *testing.T) {
	h := newHarness(t)
	h.fake.token = "secret"
	answer := func(sandbox, token string) (int, string) {
		h.hdr.Set(HeaderSandboxID, sandbox)
		h.hdr.Set(headerAccessToken, token)
		if token == "" {
			h.hdr.Del(headerAccessToken)
		}
		st, body := h.do(t, "GET", "/health", "", nil)
		return st, strings.ReplaceAll(body, sandbox, "ID")
	}
	goneSt, goneBody := answer("gone", "")
	if goneSt != http.StatusBadGateway {
		t.Fatalf("health of no sandbox = %d %s, want 502", goneSt, goneBody)
	}
	for _, tok := range []string{"", "wrong"} {
		if st, body := answer(fakeID, tok); st != goneSt || body != goneBody {
			t.Errorf("health of a running sandbox with token %q = %d %s; want what a missing one answers: %d %s",
				tok, st, body, goneSt, goneBody)
		}
		if st, body := answer("gone", tok); st != goneSt || body != goneBody {
			t.Errorf("health of no sandbox with token %q = %d %s, want %d %s", tok, st, body, goneSt, goneBody)
		}
	}
	if st, body := answer(fakeID, "secret"); st != http.StatusNoContent {
		t.Errorf("health with the token = %d %s, want 204", st, body)
	}
	// By name: the same answer, which names the name, never the id it resolves to.
	h.fake.names = map[string]string{"kiwi": fakeID}
	for _, tok := range []string{"", "wrong"} {
		if st, body := answer("kiwi", tok); st != goneSt || body != goneBody {
			t.Errorf("health of a running sandbox by name with token %q = %d %s, want %d %s", tok, st, body, goneSt, goneBody)
		}
	}
	h.hdr.Set(HeaderSandboxID, "kiwi")
	h.hdr.Set(headerAccessToken, "wrong")
	_, err := h.proc.List(ctxT(t), connect.NewRequest(&pb.ListRequest{}))
	if err == nil || strings.Contains(err.Error(), fakeID) {
		t.Errorf("a call by name with a wrong token = %v: want refused without the sandbox's id", err)
	}
	if st, body := answer("kiwi", "secret"); st != http.StatusNoContent {
		t.Errorf("health by name with the token = %d %s, want 204", st, body)
	}
}

func TestAccessToken(t *testing.T) {
	h := newHarness(t)
	h.fake.token = "secret"
	h.fake.files["/home/user/f"] = []byte("data")
	ctx := ctxT(t)

	_, err := h.proc.List(ctx, connect.NewRequest(&pb.ListRequest{}))
	wantCode(t, err, connect.CodeUnauthenticated, headerAccessToken)
	st, body := h.do(t, "GET", "/files?path=f", "", nil)
	wantError(t, st, body, http.StatusUnauthorized, headerAccessToken)
	// /health without the token tells nothing (TestHealthWithoutToken).
	if st, _ := h.do(t, "GET", "/health", "", nil); st != http.StatusBadGateway {
		t.Fatalf("health without the token = %d, want 502", st)
	}

	// A signed URL, as the SDK's downloadUrl makes it.
	exp := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
	sum := sha256.Sum256([]byte("f:read:user:secret:" + exp))
	sig := "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
	q := url.Values{"path": {"f"}, "username": {"user"}, "signature": {sig}, "signature_expiration": {exp}}
	if st, body := h.do(t, "GET", "/files?"+q.Encode(), "", nil); st != http.StatusOK || body != "data" {
		t.Fatalf("signed download = %d %s", st, body)
	}
	q.Set("path", "g")
	st, body = h.do(t, "GET", "/files?"+q.Encode(), "", nil)
	wantError(t, st, body, http.StatusUnauthorized, "signature")

	h.hdr.Set(headerAccessToken, "wrong")
	_, err = h.proc.List(ctx, connect.NewRequest(&pb.ListRequest{}))
	wantCode(t, err, connect.CodeUnauthenticated, "not the access token")
	h.hdr.Set(headerAccessToken, "secret")
	if _, err := h.proc.List(ctx, connect.NewRequest(&pb.ListRequest{})); err != nil {
		t.Fatal(err)
	}
	if st, body := h.do(t, "GET", "/files?path=f", "", nil); st != http.StatusOK || body != "data" {
		t.Fatalf("download with the token = %d %s", st, body)
	}
}

// executeLines posts to /execute and returns its NDJSON lines.
func (h *harness) executeLines(t *testing.T, body string) (int, []map[string]any, string) {
	t.Helper()
	st, out := h.do(t, "POST", "/execute", "application/json", strings.NewReader(body))
	if st != http.StatusOK {
		return st, nil, out
	}
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	return st, lines, out
}

// TestCodeStateByID: the code interpreter's state (its execution count) is the sandbox's, by
// id: asked by name or by id it is one; a later sandbox given that name starts its own.
func TestCodeStateByID(t *testing.T) {
	h := newHarness(t)
	h.fake.names = map[string]string{"box": fakeID}
	count := func(ref string) any {
		t.Helper()
		h.hdr.Set(HeaderSandboxID, ref)
		_, lines, out := h.executeLines(t, `{"code":"1+1"}`)
		for _, l := range lines {
			if l["type"] == "number_of_executions" {
				return l["execution_count"]
			}
		}
		t.Fatalf("no execution count in %s", out)
		return nil
	}
	if n := count("box"); n != 1.0 {
		t.Fatalf("first run by name: count %v", n)
	}
	if n := count(fakeID); n != 2.0 {
		t.Errorf("then by id: count %v, want 2 (one sandbox, one state)", n)
	}
	h.fake.mu.Lock()
	h.fake.names["box"] = otherID // the name now names another sandbox
	h.fake.mu.Unlock()
	if n := count("box"); n != 1.0 {
		t.Errorf("the name's new sandbox: count %v, want 1 (not the earlier sandbox's state)", n)
	}
}

func TestExecute(t *testing.T) {
	h := newHarness(t)
	_, lines, out := h.executeLines(t, `{"code":"print(hi)"}`)
	if len(lines) != 3 || lines[0]["type"] != "stdout" || lines[0]["text"] != "hi\n" ||
		lines[1]["type"] != "number_of_executions" || lines[1]["execution_count"] != 1.0 || lines[2]["type"] != "end_of_execution" {
		t.Fatalf("print: %s", out)
	}
	_, lines, out = h.executeLines(t, `{"code":"1+1","language":"python"}`)
	if lines[0]["type"] != "result" || lines[0]["text"] != "2" || lines[0]["is_main_result"] != true || lines[1]["execution_count"] != 2.0 {
		t.Fatalf("value: %s", out)
	}
	_, lines, out = h.executeLines(t, `{"code":"raise","context_id":"default"}`)
	if lines[0]["type"] != "error" || lines[0]["name"] != "NameError" || lines[0]["value"] != "name 'x' is not defined" ||
		!strings.Contains(lines[0]["traceback"].(string), "Traceback") {
		t.Fatalf("error: %s", out)
	}

	// env_vars are set around the code, and restored after it.
	h.fake.code = nil
	if _, lines, out = h.executeLines(t, `{"code":"print(x)","env_vars":{"K":"v \"q\""}}`); lines[0]["text"] != "x\n" {
		t.Fatalf("env_vars: %s", out)
	}
	if len(h.fake.code) != 4 || !strings.Contains(h.fake.code[0], "environ.update") || !strings.Contains(h.fake.code[0], `{\"K\":\"v \\\"q\\\"\"}`) ||
		h.fake.code[1] != "print(x)" || !strings.Contains(h.fake.code[2], "_zygo_saved") || h.fake.code[3] != figuresCode {
		t.Fatalf("codes run: %q", h.fake.code)
	}

	// Figures matplotlib left open come as PNG results before the main one.
	h.fake.figures = "aGk=,aG8="
	_, lines, out = h.executeLines(t, `{"code":"1+1"}`)
	if len(lines) != 5 || lines[0]["png"] != "aGk=" || lines[0]["is_main_result"] != false || lines[1]["png"] != "aG8=" ||
		lines[2]["text"] != "2" || lines[2]["is_main_result"] != true {
		t.Fatalf("figures: %s", out)
	}
	h.fake.figures = ""

	st, _, out := h.executeLines(t, `{"code":"1","language":"r"}`)
	wantError(t, st, out, http.StatusBadRequest, `language "r"`)
	st, _, out = h.executeLines(t, `{"code":1}`)
	wantError(t, st, out, http.StatusBadRequest, `field "code"`)
	st, _, out = h.executeLines(t, `{"code":"1","lang":"python"}`)
	wantError(t, st, out, http.StatusBadRequest, `"lang"`)
	st, _, out = h.executeLines(t, `{"code":"1","context_id":"c2"}`)
	wantError(t, st, out, http.StatusNotFound, `"c2"`)
	h.hdr.Set(HeaderSandboxID, "gone")
	st, _, out = h.executeLines(t, `{"code":"1"}`)
	wantError(t, st, out, http.StatusBadGateway, "not running")
}

func TestContexts(t *testing.T) {
	h := newHarness(t)
	st, body := h.do(t, "POST", "/contexts", "application/json", strings.NewReader(`{"language":"python"}`))
	var c codeContext
	if err := json.Unmarshal([]byte(body), &c); err != nil || st != http.StatusOK || c.ID != defaultContext || c.Language != "python" {
		t.Fatalf("create context = %d %s", st, body)
	}
	st, body = h.do(t, "POST", "/contexts", "application/json", strings.NewReader(`{"language":"js"}`))
	wantError(t, st, body, http.StatusBadRequest, `"js"`)
}

func TestUTF8Split(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{{"abc", 3}, {"a\xc3", 1}, {"a\xc3\xa9", 3}, {"\xe2\x82", 0}, {"\xff\xff", 2}} {
		if got := completeUTF8([]byte(c.in)); got != c.want {
			t.Errorf("completeUTF8(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestErrorKinds(t *testing.T) {
	for _, cat := range errdefs.All() {
		if _, _, ok := classify(cat); !ok {
			t.Errorf("category %v has no Connect code", cat)
		}
	}
}

// A multipart upload that fails leaves nothing written (no target, no staged part), and its
// error names the part: one over the file cap, or a bad part between good ones.
func TestUploadMultipartAllOrNothing(t *testing.T) {
	h := newHarness(t)
	h.fake.files["/tmp/mp/keep.txt"] = []byte("old")
	for _, c := range []struct {
		name  string
		parts int
		bad   int // index of a part not named "file"; -1 for none
		want  string
	}{
		{"over the cap", maxUploadFiles + 200, -1, fmt.Sprintf("part %d: the body has more than %d files", maxUploadFiles, maxUploadFiles)},
		{"a bad part in the middle", 5, 2, "part 2 is named"},
	} {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		for i := range c.parts {
			form, name := "file", fmt.Sprintf("/tmp/mp/f%d.txt", i)
			if i == c.bad {
				form = "other"
			}
			if i == 1 {
				name = "/tmp/mp/keep.txt"
			}
			fw, _ := mw.CreateFormFile(form, name)
			_, _ = fw.Write([]byte("new"))
		}
		_ = mw.Close()
		st, body := h.do(t, "POST", "/files?username=user", mw.FormDataContentType(), &buf)
		if st != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Fatalf("%s: upload = %d %s; want 400 naming %q", c.name, st, body, c.want)
		}
		h.fake.mu.Lock()
		for p := range h.fake.files {
			if p != "/tmp/mp/keep.txt" && strings.HasPrefix(p, "/tmp/mp/") {
				t.Errorf("%s: %s left written", c.name, p)
			}
		}
		if got := string(h.fake.files["/tmp/mp/keep.txt"]); got != "old" {
			t.Errorf("%s: /tmp/mp/keep.txt = %q, want the old content kept", c.name, got)
		}
		h.fake.mu.Unlock()
	}
	// All parts good: every target written, nothing staged left.
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for i := range 3 {
		fw, _ := mw.CreateFormFile("file", fmt.Sprintf("/tmp/ok/f%d.txt", i))
		_, _ = fw.Write([]byte("ok"))
	}
	_ = mw.Close()
	if st, body := h.do(t, "POST", "/files?username=user", mw.FormDataContentType(), &buf); st != http.StatusOK {
		t.Fatalf("good upload = %d %s", st, body)
	}
	h.fake.mu.Lock()
	defer h.fake.mu.Unlock()
	for p := range h.fake.files {
		if strings.HasPrefix(p, "/tmp/ok/") && !strings.HasPrefix(path.Base(p), "f") {
			t.Errorf("%s left staged", p)
		}
	}
	for i := range 3 {
		if p := fmt.Sprintf("/tmp/ok/f%d.txt", i); string(h.fake.files[p]) != "ok" || h.fake.owners[p] != "user" {
			t.Errorf("%s = %q owned by %q", p, h.fake.files[p], h.fake.owners[p])
		}
	}
}
