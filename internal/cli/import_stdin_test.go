package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// `zygo sandbox checkpoints export CP | zygo sandbox checkpoints import -`: stdin without
// --sha256 is spooled and sent with its own digest and length.
func TestImportStdinComputesTheDigest(t *testing.T) {
	const tarBody = "not really a tar, but the daemon here only checks the digest"
	var gotSum, gotBody string
	var gotLen int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(wire.APIVersionHeader, "1")
		w.Header().Set("Content-Type", "application/json")
		b, _ := io.ReadAll(r.Body)
		gotSum, gotBody, gotLen = r.URL.Query().Get("sha256"), string(b), r.ContentLength
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(wire.Checkpoint{ID: "cp-imported"})
	}))
	defer ts.Close()
	t.Setenv("ZYGO_TOKEN", "t")
	code, stdout, stderr := runCLIWithStdin(t, tarBody, "--addr", strings.TrimPrefix(ts.URL, "http://"), "sandbox", "checkpoints", "import", "-")
	want := sha256.Sum256([]byte(tarBody))
	if code != 0 || strings.TrimSpace(stdout) != "cp-imported" {
		t.Fatalf("import -: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if gotSum != hex.EncodeToString(want[:]) || gotBody != tarBody || gotLen != int64(len(tarBody)) {
		t.Errorf("the daemon got sha256 %q, %d bytes (length %d); want the body's own digest and length", gotSum, len(gotBody), gotLen)
	}
}

// Stdin over the spool's bound is refused, saying to give --sha256.
func TestSpoolStdinBound(t *testing.T) {
	f, sum, err := spoolStdin(strings.NewReader("12345"), 5)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if want := sha256.Sum256([]byte("12345")); string(b) != "12345" || sum != hex.EncodeToString(want[:]) {
		t.Errorf("spooled %q with %s", b, sum)
	}
	if _, _, err := spoolStdin(strings.NewReader("123456"), 5); err == nil || !strings.Contains(err.Error(), "--sha256") {
		t.Errorf("over the bound: %v, want an error saying to give --sha256", err)
	}
}
