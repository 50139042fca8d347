package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/api"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/store"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// accessSandboxes is a hand-written api.Sandboxes of several sandboxes, found by id or name.
// The methods a sandbox access token may reach record the id they were called with; every
// other method panics (the embedded nil interface), so a refused call that reached the
// manager fails the test.
type accessSandboxes struct {
	api.Sandboxes

	mu   sync.Mutex // guards recs and hits
	recs map[string]sandbox.SandboxRecord
	hits []string // "METHOD-NAME ID"
}

func (f *accessSandboxes) Get(_ context.Context, idOrName string) (sandbox.SandboxRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.recs {
		if r.ID == idOrName || r.Name == idOrName {
			return r, nil
		}
	}
	return sandbox.SandboxRecord{}, fmt.Errorf("sandbox %q: %w", idOrName, errdefs.ErrNotFound)
}

func (f *accessSandboxes) hit(method, id string) {
	f.mu.Lock()
	f.hits = append(f.hits, method+" "+id)
	f.mu.Unlock()
}

func (f *accessSandboxes) Exec(_ context.Context, id string, _ guest.ExecRequest, stdout, _ io.Writer) (guest.ExitStatus, error) {
	f.hit("Exec", id)
	fmt.Fprint(stdout, "ran in "+id)
	return guest.ExitStatus{}, nil
}

func (f *accessSandboxes) RunCode(_ context.Context, id string, _ guest.CodeRequest, _, _ io.Writer) (guest.CodeResult, error) {
	f.hit("RunCode", id)
	return guest.CodeResult{OK: true}, nil
}

func (f *accessSandboxes) PutFile(_ context.Context, id, _ string, _ uint32, r io.Reader) error {
	f.hit("PutFile", id)
	_, err := io.Copy(io.Discard, r)
	return err
}

func (f *accessSandboxes) GetFile(_ context.Context, id, _ string, w io.Writer) error {
	f.hit("GetFile", id)
	_, err := io.WriteString(w, "data")
	return err
}

func (f *accessSandboxes) ListFiles(_ context.Context, id, _ string) (guest.Listing, error) {
	f.hit("ListFiles", id)
	return guest.Listing{}, nil
}

func (f *accessSandboxes) Services(_ context.Context, id string) ([]guest.ServiceStatus, error) {
	f.hit("Services", id)
	return nil, nil
}

func (f *accessSandboxes) Port(_ context.Context, id string, _ int) (string, error) {
	f.hit("Port", id)
	return "127.0.0.1:1", nil
}

func (f *accessSandboxes) Unpublish(_ context.Context, id string, _ int) error {
	f.hit("Unpublish", id)
	return nil
}

var created0 = time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC)

// accessServer returns the unix-socket and TCP handlers of a server with two running
// sandboxes, "a" (sb-00000000000000aa) and "b" (sb-00000000000000bb), the default token
// testToken, and the access key key.
func accessServer(t *testing.T, key []byte) (unix, tcp http.Handler, sb *accessSandboxes) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "zygo.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	toks, err := api.NewTokens(ctx, st, "", testToken, log)
	if err != nil {
		t.Fatal(err)
	}
	sb = &accessSandboxes{recs: map[string]sandbox.SandboxRecord{}}
	for _, n := range []string{"a", "b"} {
		id := "sb-00000000000000" + n + n
		sb.recs[id] = sandbox.SandboxRecord{ID: id, Name: n, State: sandbox.Running, Generation: strings.Repeat("0", 32), CreatedAt: created0}
	}
	f := newFixture()
	srv := api.NewServer(f.fns, f.logs, f.secrets, log, "test").WithTokens(toks).WithSandboxes(sb, nil).WithAccessKey(key)
	return srv.Handler(), srv.TCPHandler(), sb
}

// mint returns the access token of sandbox ref, minted on h with tok (over the unix socket: "").
func mint(t *testing.T, h http.Handler, ref, tok string) wire.SandboxAccessToken {
	t.Helper()
	rec := serve(h, "POST", "/v1/sandboxes/"+ref+"/access-token", "", tok)
	var at wire.SandboxAccessToken
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &at) != nil {
		t.Fatalf("minting the access token of %s: %d %s", ref, rec.Code, rec.Body)
	}
	return at
}

// scopedCalls is one call of each route a sandbox access token reaches, on sandbox ref, and
// the manager method it ends in ("" for those the record answers).
func scopedCalls(ref string) []struct{ method, target, body, hit string } {
	p := "/v1/sandboxes/" + ref
	return []struct{ method, target, body, hit string }{
		{"GET", p, "", ""},
		{"POST", p + "/exec", `{"argv": ["true"]}`, "Exec"},
		{"POST", p + "/run-code", `{"code": "1"}`, "RunCode"},
		{"PUT", p + "/files?path=/tmp/x", "data", "PutFile"},
		{"GET", p + "/files?path=/tmp/x", "", "GetFile"},
		{"GET", p + "/files/list?path=/tmp", "", "ListFiles"},
		{"GET", p + "/generation", "", ""},
		{"GET", p + "/services", "", "Services"},
		{"POST", p + "/ports/8080", "", "Port"},
		{"DELETE", p + "/ports/8080", "", "Unpublish"},
	}
}

// A sandbox access token reaches its own sandbox's exec, files, run-code, record, generation,
// services and ports, by id or by name (the handler then acts on the id), and nothing of
// another sandbox (403 naming both).
func TestSandboxAccessTokenReach(t *testing.T) {
	key := bytes.Repeat([]byte{1}, 32)
	unix, tcp, sb := accessServer(t, key)
	at := mint(t, unix, "a", "")
	if at.SandboxID != "sb-00000000000000aa" || !strings.HasPrefix(at.Token, "zygo_sbx_sb-00000000000000aa_") || len(at.Token) != len("zygo_sbx_sb-00000000000000aa_")+64 {
		t.Fatalf("minted %+v", at)
	}
	if again := mint(t, tcp, "sb-00000000000000aa", testToken); again != at {
		t.Fatalf("minted twice: %+v then %+v, want the same token", at, again)
	}
	if other := mint(t, unix, "b", ""); other.Token == at.Token {
		t.Fatal("sandboxes a and b have the same access token")
	}
	for _, ref := range []string{"sb-00000000000000aa", "a"} {
		for _, c := range scopedCalls(ref) {
			sb.hits = nil
			rec := serve(tcp, c.method, c.target, c.body, at.Token)
			if rec.Code >= 300 {
				t.Errorf("%s %s with a's access token: %d %s", c.method, c.target, rec.Code, rec.Body)
				continue
			}
			if c.hit != "" && (len(sb.hits) != 1 || sb.hits[0] != c.hit+" sb-00000000000000aa") {
				t.Errorf("%s %s: the manager was called %v, want %s on sb-00000000000000aa", c.method, c.target, sb.hits, c.hit)
			}
		}
	}
	for _, ref := range []string{"sb-00000000000000bb", "b", "nope"} {
		for _, c := range scopedCalls(ref) {
			sb.hits = nil
			rec := serve(tcp, c.method, c.target, c.body, at.Token)
			if rec.Code != 403 || !strings.Contains(rec.Body.String(), "does not reach sandbox "+ref) || len(sb.hits) != 0 {
				t.Errorf("%s %s with a's access token: %d %s (manager called %v), want 403 naming %s", c.method, c.target, rec.Code, rec.Body, sb.hits, ref)
			}
		}
	}
}

// Every route but the sandbox's own is refused to a sandbox access token (403, saying it
// needs a daemon token), before the handler runs; the daemon token still reaches them.
func TestSandboxAccessTokenRefused(t *testing.T) {
	unix, tcp, sb := accessServer(t, bytes.Repeat([]byte{2}, 32))
	at := mint(t, unix, "a", "")
	allowed := map[string]bool{}
	for _, c := range scopedCalls("{id}") {
		allowed[c.method+" "+strings.SplitN(c.target, "?", 2)[0]] = true
	}
	allowed["POST /v1/sandboxes/{id}/ports/8080"] = true
	refused := 0
	for _, r := range api.Routes() {
		if allowed[r.String()] || r.String() == "POST /v1/sandboxes/{id}/ports/{port}" || r.String() == "DELETE /v1/sandboxes/{id}/ports/{port}" {
			continue
		}
		target := strings.NewReplacer("{id}", "sb-00000000000000aa", "{name}", "x", "{port}", "80").Replace(r.Path)
		rec := serve(tcp, r.Method, target, "{}", at.Token)
		if rec.Code != 403 || !strings.Contains(rec.Body.String(), "needs one of the daemon's tokens") ||
			!strings.Contains(rec.Body.String(), "access token of sandbox sb-00000000000000aa") {
			t.Errorf("%s with a's access token: %d %s, want 403", r, rec.Code, rec.Body)
		}
		refused++
	}
	if refused < 30 || len(sb.hits) != 0 {
		t.Fatalf("%d routes refused (manager called %v)", refused, sb.hits)
	}
	// The classes the brief names, spelt out: create, remove, fork, checkpoint, rollback,
	// pause, resume, minting, tokens, secrets, functions, pools.
	for _, c := range [][2]string{{"POST", "/v1/sandboxes"}, {"DELETE", "/v1/sandboxes/a"}, {"POST", "/v1/sandboxes/a/fork"},
		{"POST", "/v1/sandboxes/a/checkpoint"}, {"POST", "/v1/sandboxes/a/rollback"}, {"POST", "/v1/sandboxes/a/pause"},
		{"POST", "/v1/sandboxes/a/resume"}, {"POST", "/v1/sandboxes/a/access-token"}, {"GET", "/v1/tokens"}, {"POST", "/v1/tokens"},
		{"GET", "/v1/secrets"}, {"PUT", "/v1/secrets/k"}, {"GET", "/v1/functions"}, {"GET", "/v1/pools"}, {"GET", "/v1/sandboxes"},
		{"GET", "/v1/status"}, {"GET", "/metrics"}} {
		if rec := serve(tcp, c[0], c[1], "{}", at.Token); rec.Code != 403 {
			t.Errorf("%s %s with a's access token: %d %s, want 403", c[0], c[1], rec.Code, rec.Body)
		}
	}
	// The daemon's token is not narrowed.
	if rec := serve(tcp, "GET", "/v1/sandboxes/b", "", testToken); rec.Code != 200 {
		t.Errorf("GET sandbox b with the default token: %d %s", rec.Code, rec.Body)
	}
}

// A sandbox access token dies with its sandbox and is not revived by a sandbox made again
// with the same id (another creation time); a copy of the sandbox (another id) is another
// sandbox; a token changed in any digit, or made under another key, is refused (401).
func TestSandboxAccessTokenLifetime(t *testing.T) {
	key := bytes.Repeat([]byte{3}, 32)
	unix, tcp, sb := accessServer(t, key)
	at := mint(t, unix, "a", "")
	get := func(tok, ref string) int { return serve(tcp, "GET", "/v1/sandboxes/"+ref, "", tok).Code }
	if c := get(at.Token, "a"); c != 200 {
		t.Fatalf("before: %d", c)
	}
	// A fork of a: a new record (id, creation), its parent a.
	sb.recs["sb-00000000000000cc"] = sandbox.SandboxRecord{ID: "sb-00000000000000cc", Name: "a-copy", ParentID: "sb-00000000000000aa",
		State: sandbox.Running, CreatedAt: created0.Add(time.Second)}
	if c := get(at.Token, "a-copy"); c != 403 {
		t.Errorf("a's token on a's fork: %d, want 403", c)
	}
	if child := mint(t, unix, "a-copy", ""); child.Token == at.Token || get(child.Token, "a") != 403 || get(child.Token, "a-copy") != 200 {
		t.Errorf("the fork's token %s: reaches a, or not the fork", child.Token)
	}
	bad := []string{
		at.Token[:len(at.Token)-1] + map[bool]string{true: "1", false: "0"}[strings.HasSuffix(at.Token, "0")], // one digit off
		strings.Replace(at.Token, "sb-00000000000000aa", "sb-00000000000000bb", 1),                            // another sandbox's id
		strings.Replace(at.Token, "sb-00000000000000aa", "a", 1),                                              // by name
		"zygo_sbx_sb-00000000000000aa_", "zygo_sbx_",
	}
	_, tcp2, _ := accessServer(t, bytes.Repeat([]byte{4}, 32))
	for _, tok := range bad {
		if c := get(tok, "a"); c != 401 {
			t.Errorf("token %q: %d, want 401", tok, c)
		}
	}
	// A token not in shape is called malformed, not a removed sandbox's.
	for _, tok := range []string{"zygo_sbx_garbage", "zygo_sbx_", "zygo_sbx_sb-00000000000000aa_" + strings.Repeat("G", 64),
		strings.Replace(at.Token, "sb-00000000000000aa", "a", 1)} {
		resp := serve(tcp, "GET", "/v1/sandboxes/a", "", tok)
		if body := resp.Body.String(); resp.Code != 401 || !strings.Contains(body, "malformed sandbox access token") || strings.Contains(body, "removed") {
			t.Errorf("token %q: %d %s, want 401 saying it is malformed", tok, resp.Code, body)
		}
	}
	if c := get(at.Token, "a"); c != 200 {
		t.Fatalf("the right token after wrong ones: %d", c)
	}
	if c := serve(tcp2, "GET", "/v1/sandboxes/a", "", at.Token).Code; c != 401 {
		t.Errorf("a's token on a daemon of another key: %d, want 401", c)
	}
	// Made again: same id and name, later creation.
	rec := sb.recs["sb-00000000000000aa"]
	rec.CreatedAt = rec.CreatedAt.Add(time.Nanosecond)
	sb.recs[rec.ID] = rec
	if c := get(at.Token, "a"); c != 401 {
		t.Errorf("a's token on a sandbox made again with a's id: %d, want 401", c)
	}
	// Removed.
	delete(sb.recs, rec.ID)
	resp := serve(tcp, "POST", "/v1/sandboxes/sb-00000000000000aa/exec", `{"argv": ["true"]}`, at.Token)
	if resp.Code != 401 || !strings.Contains(resp.Body.String(), "sandbox was removed") {
		t.Errorf("a's token after a's removal: %d %s, want 401", resp.Code, resp.Body)
	}
}

// A daemon without an access key mints none (503) and accepts none (401).
func TestSandboxAccessTokenNoKey(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "zygo.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	toks, err := api.NewTokens(ctx, st, "", testToken, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	sb := &accessSandboxes{recs: map[string]sandbox.SandboxRecord{"sb-00000000000000aa": {ID: "sb-00000000000000aa", Name: "a", CreatedAt: created0}}}
	f := newFixture()
	srv := api.NewServer(f.fns, f.logs, f.secrets, slog.New(slog.DiscardHandler), "test").WithTokens(toks).WithSandboxes(sb, nil)
	if rec := serve(srv.Handler(), "POST", "/v1/sandboxes/a/access-token", "", ""); rec.Code != 503 {
		t.Errorf("minting without a key: %d %s", rec.Code, rec.Body)
	}
	tok := "zygo_sbx_sb-00000000000000aa_" + strings.Repeat("0", 64)
	if rec := serve(srv.TCPHandler(), "GET", "/v1/sandboxes/a", "", tok); rec.Code != 401 {
		t.Errorf("an access token on a daemon without a key: %d %s", rec.Code, rec.Body)
	}
}
