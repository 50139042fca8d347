package zygo

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// NewTLSClient verifies the daemon's certificate against the CA given (LoadCA) and sends the
// token; without the CA the certificate does not verify (an *Unreachable).
func TestTLSClient(t *testing.T) {
	var gotAuth string
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		w.Write([]byte(`{"version": "v-tls", "uptime_ms": 1, "functions": 0}`))
	}))
	defer ts.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	pool, err := LoadCA(caFile)
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(ts.URL, "https://")
	st, err := NewTLSClient(addr, "tok", &tls.Config{RootCAs: pool}).Status(context.Background())
	if err != nil || st.Version != "v-tls" || gotAuth != "Bearer tok" {
		t.Errorf("Status over TLS = %+v, %v; Authorization %q", st, err, gotAuth)
	}
	var ue *Unreachable
	var ua x509.UnknownAuthorityError
	_, err = NewTLSClient(addr, "tok", nil).Status(context.Background())
	if !errors.As(err, &ue) || !errors.As(err, &ua) {
		t.Errorf("Status without the CA = %v, want an *Unreachable of an unknown authority", err)
	}
	if _, err := LoadCA(filepath.Join(t.TempDir(), "none.pem")); err == nil {
		t.Error("LoadCA of a missing file succeeded")
	}
	if err := os.WriteFile(caFile, []byte("not pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(caFile); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("LoadCA of a file without PEM = %v", err)
	}
}

// failingReader fails after its first read.
type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n > 0 {
		return 0, errors.New("disk on fire")
	}
	f.n++
	return copy(p, "abc"), nil
}

// A request body that cannot be read is the caller's error (*BodyError), not the daemon's
// absence (*Unreachable).
func TestBodyErrorIsNotUnreachable(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = r.Body.Read(make([]byte, 1<<16))
		w.WriteHeader(http.StatusNoContent)
	}))
	defer ts.Close()
	c := NewTCPClient(strings.TrimPrefix(ts.URL, "http://"), "")
	err := c.PutFile(context.Background(), "sb", "/x", 0o644, &failingReader{})
	var be *BodyError
	var ue *Unreachable
	if !errors.As(err, &be) || errors.As(err, &ue) || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("PutFile with a failing body = %v (%T), want a *BodyError", err, err)
	}
}
