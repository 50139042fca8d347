package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
)

// fakeSecrets is a secret store: SecretsFunc over a map that the test rotates.
type fakeSecrets struct {
	mu   sync.Mutex // guards vals
	vals map[string]string
}

func (f *fakeSecrets) set(name, val string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if val == "" {
		delete(f.vals, name)
		return
	}
	f.vals[name] = val
}

func (f *fakeSecrets) read(_ context.Context, names []string) (SecretValues, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := SecretValues{}
	for _, n := range names {
		v, ok := f.vals[n]
		if !ok {
			return nil, &UnknownSecretError{Name: n}
		}
		out[n] = []byte(v)
	}
	return out, nil
}

// secretReseal is fakeReseal that records, per sandbox id, the secrets the hook was given.
type secretReseal struct {
	mu  sync.Mutex // guards got
	got map[string]string
}

func (r *secretReseal) reseal(ctx context.Context, t ResealTarget) (guest.ResealResult, error) {
	r.mu.Lock()
	r.got[t.Sandbox.ID] = string(t.Secrets["API_KEY"])
	r.mu.Unlock()
	return fakeReseal(ctx, t)
}

func (r *secretReseal) value(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[id]
}

func newSecretManager(t *testing.T, be Backend, reg Registry, rs *secretReseal, sec *fakeSecrets) *Manager {
	t.Helper()
	m, err := NewManager(ManagerConfig{Backend: be, Registry: reg, ImageDir: t.TempDir(), Reseal: rs.reseal, Secrets: sec.read})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCreateRefusesBadSecrets: an unknown, repeated or unsupported secret name is a 400-class
// error naming it, and nothing is left behind (the names are checked before anything starts).
func TestCreateRefusesBadSecrets(t *testing.T) {
	ctx := context.Background()
	be, reg := newFake(), NewMemRegistry()
	sec := &fakeSecrets{vals: map[string]string{"API_KEY": "v1"}}
	m := newSecretManager(t, be, reg, &secretReseal{got: map[string]string{}}, sec)
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"NOPE"}, `unknown secret "NOPE"`},
		{[]string{"API_KEY", "API_KEY"}, `"API_KEY" given twice`},
	} {
		_, err := m.Create(ctx, CreateOptions{Secrets: tc.names})
		if !errdefs.IsInvalidArgument(err) || errdefs.IsNotFound(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Create(secrets %v) = %v, want invalid argument with %q", tc.names, err, tc.want)
		}
	}
	none := newTestManager(t, be, reg, nil) // no secret source
	if _, err := none.Create(ctx, CreateOptions{Secrets: []string{"API_KEY"}}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Create with secrets and no source = %v", err)
	}
	if recs, _ := reg.ListSandboxes(ctx); len(recs) != 0 {
		t.Errorf("records left: %+v", recs)
	}
	if ids, _ := be.List(ctx); len(ids) != 0 {
		t.Errorf("instances left: %v", ids)
	}
}

// TestResealGetsCurrentSecrets: every restored copy (fork child, rollback) is given the values
// current at its reseal, by the names of the image it was restored from; a secret gone from
// the store fails the copy with its name.
func TestResealGetsCurrentSecrets(t *testing.T) {
	ctx := context.Background()
	be, reg := newFake(), NewMemRegistry()
	sec := &fakeSecrets{vals: map[string]string{"API_KEY": "v1"}}
	rs := &secretReseal{got: map[string]string{}}
	m := newSecretManager(t, be, reg, rs, sec)
	// The fake backend has no guest to write create-time secrets to, so the sandbox is made
	// without them and the checkpoint names them, as one of a sandbox given them would.
	src, err := m.Create(ctx, CreateOptions{Name: "src"})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := m.Checkpoint(ctx, src.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	cp.ID, cp.Tag, cp.Options.Secrets = "cp-secret", "with-secret", []string{"API_KEY"}
	if err := reg.PutCheckpoint(ctx, cp); err != nil {
		t.Fatal(err)
	}
	fork := func(want string) {
		t.Helper()
		res, err := m.Fork(ctx, src.ID, ForkOptions{N: 2, From: "with-secret"})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range res.Children {
			if got := rs.value(c.Sandbox.ID); got != want {
				t.Errorf("child %s was given %q, want %q", c.Sandbox.ID, got, want)
			}
			if fmt.Sprint(c.Sandbox.Options.Secrets) != "[API_KEY]" {
				t.Errorf("child record names %v", c.Sandbox.Options.Secrets)
			}
		}
	}
	fork("v1")
	sec.set("API_KEY", "v2")
	fork("v2")
	if rs.value(src.ID) != "" {
		t.Errorf("the source was resealed")
	}

	rb, err := m.Rollback(ctx, src.ID, "with-secret")
	if err != nil {
		t.Fatal(err)
	}
	if got := rs.value(src.ID); got != "v2" || fmt.Sprint(rb.Options.Secrets) != "[API_KEY]" {
		t.Errorf("rollback: given %q, record names %v", got, rb.Options.Secrets)
	}

	sec.set("API_KEY", "")
	res, err := m.Fork(ctx, src.ID, ForkOptions{N: 1, From: "with-secret"})
	if err == nil || !strings.Contains(res.Children[0].Error, `unknown secret "API_KEY"`) {
		t.Errorf("fork with the secret gone = %+v, %v", res.Children, err)
	}
	if ids, _ := be.List(ctx); len(ids) != 5 { // src (rolled back) + 4 children
		t.Errorf("instances: %v, want 5", ids)
	}
}

// TestSecretValuesRedacted: a SecretValues printed or logged shows its names only.
func TestSecretValuesRedacted(t *testing.T) {
	v := SecretValues{"B": []byte("hunter2"), "A": []byte("s3cr3t")}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("x", "secrets", v, "target", ResealTarget{Secrets: v})
	for _, s := range []string{fmt.Sprint(v), fmt.Sprintf("%v %s %+v %#v", v, v, v, v),
		fmt.Sprintf("%+v", ResealTarget{Secrets: v}), logged.String(),
		fmt.Errorf("wrapped %v: %w", v, errors.New("x")).Error()} {
		if strings.Contains(s, "hunter2") || strings.Contains(s, "s3cr3t") || !strings.Contains(s, "[redacted: A, B]") {
			t.Errorf("printed as %q", s)
		}
	}
}
