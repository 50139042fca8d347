package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// serverURLs maps a test's client to the base URL of its server, for rawCall.
var serverURLs sync.Map

// rawCall sends a request the SDK would not make (a malformed body) to c's server and returns
// nil for a 2xx answer, else the answer as a *zygo.Error.
func rawCall(t *testing.T, c *zygo.Client, method, path string, body io.Reader, ctype string) error {
	t.Helper()
	base, ok := serverURLs.Load(c)
	if !ok {
		t.Fatal("rawCall: the client was not made by newTestServer")
	}
	req, err := http.NewRequest(method, base.(string)+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 300 {
		return nil
	}
	var ea wire.ErrorAnswer
	if err := json.NewDecoder(resp.Body).Decode(&ea); err != nil {
		t.Fatalf("%s %s: %d without an error body: %v", method, path, resp.StatusCode, err)
	}
	return &zygo.Error{Status: resp.StatusCode, ErrorBody: ea.Error}
}

func sbPath(id string, rest ...string) string {
	p := "/v1/sandboxes/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// rawGet returns the body of GET path from c's server.
func rawGet(t *testing.T, c *zygo.Client, path string) []byte {
	t.Helper()
	base, _ := serverURLs.Load(c)
	resp, err := http.Get(base.(string) + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
