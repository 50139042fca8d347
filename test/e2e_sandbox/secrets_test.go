package e2esandbox

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSandboxSecrets gives a sandbox a secret through the CLI and follows it through copies:
// the sandbox reads it at /run/secrets/NAME (0400, not in the environment); the secret is set
// again; a fork of 2 and a rollback each get the new value while the parent keeps the one it
// was given; the record names the secret, and neither `zygo sandbox` output, the daemon's log
// nor any file the daemon keeps outside the checkpoint images holds a value. An unknown or
// malformed name fails create with its name, and a secret in use cannot be removed.
func TestSandboxSecrets(t *testing.T) {
	d := startDaemon(t)
	v1, v2 := "v1-"+randomHex(t), "v2-"+randomHex(t)
	var shown []string // every `zygo sandbox` output that must not hold a value
	sb := func(args ...string) string {
		t.Helper()
		out := d.OK(append([]string{"sandbox"}, args...)...)
		shown = append(shown, out)
		return out
	}
	readSecret := func(id string) string {
		t.Helper()
		return d.OK("sandbox", "exec", id, "--", "cat", "/run/secrets/API_KEY")
	}
	if _, errOut, code := d.CLIIn(v1+"\n", "secret", "set", "API_KEY"); code != 0 {
		t.Fatalf("secret set: %s", errOut)
	}

	for name, want := range map[string]string{"NOPE": `unknown secret "NOPE"`, "bad-name": `secret name "bad-name" must match`} {
		if msg := d.Fails("sandbox", "create", "--secret", "API_KEY", "--secret", name); !strings.Contains(msg, want) {
			t.Errorf("create --secret %s: %q, want %q", name, msg, want)
		}
	}
	if recs := d.Sandboxes(); len(recs) != 0 {
		t.Fatalf("a refused create left sandboxes: %+v", recs)
	}

	src := sb("create", "--name", "sec", "--secret", "API_KEY")
	if got := readSecret(src); got != v1 {
		t.Fatalf("/run/secrets/API_KEY in the new sandbox: %q, want the value set", got)
	}
	if mode := d.OK("sandbox", "exec", src, "--", "stat", "-c", "%a", "/run/secrets/API_KEY"); mode != "400" {
		t.Errorf("/run/secrets/API_KEY has mode %s, want 400", mode)
	}
	if env := d.OK("sandbox", "exec", src, "--", "env"); strings.Contains(env, v1) {
		t.Errorf("the value is in the environment")
	}
	if rec := d.Record(src); !slices.Equal(rec.Options.Secrets, []string{"API_KEY"}) {
		t.Errorf("record names secrets %v, want [API_KEY]", rec.Options.Secrets)
	}
	if msg := d.Fails("secret", "rm", "API_KEY"); !strings.Contains(msg, "used by sandbox sec") {
		t.Errorf("secret rm while a sandbox uses it: %q", msg)
	}

	sb("checkpoint", src, "--tag", "base") // the image holds v1 in the sandbox's memory
	if _, errOut, code := d.CLIIn(v2+"\n", "secret", "set", "API_KEY"); code != 0 {
		t.Fatalf("secret set again: %s", errOut)
	}
	kids := lines(sb("fork", src, "-n", "2", "--from", "base"))
	if len(kids) != 2 {
		t.Fatalf("fork -n 2 printed %q", kids)
	}
	for _, k := range kids {
		if got := readSecret(k); got != v2 {
			t.Errorf("child %s reads %q, want the value set after the checkpoint", k, got)
		}
		if rec := d.Record(k); !slices.Equal(rec.Options.Secrets, []string{"API_KEY"}) {
			t.Errorf("child record names secrets %v", rec.Options.Secrets)
		}
	}
	if got := readSecret(src); got != v1 {
		t.Errorf("the parent reads %q after the fork, want the value it was given", got)
	}
	sb("rollback", src, "--to", "base")
	if got := readSecret(src); got != v2 {
		t.Errorf("after rollback the sandbox reads %q, want the current value", got)
	}

	shown = append(shown, sb("ls"), sb("ls", "--json"), sb("checkpoints"), sb("checkpoints", "--json"),
		sb("generation", src))
	for _, out := range shown {
		if strings.Contains(out, v1) || strings.Contains(out, v2) {
			t.Errorf("zygo sandbox output holds a secret value:\n%s", out)
		}
	}
	if log := d.Log(); strings.Contains(log, v1) || strings.Contains(log, v2) {
		t.Errorf("the daemon log holds a secret value")
	}
	// The store keeps values encrypted; records, runsc's files and logs keep none. Only the
	// checkpoint images (the sandbox's memory) may.
	_ = filepath.WalkDir(d.StateDir, func(p string, e fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return nil
		case e.IsDir() && (p == filepath.Join(d.StateDir, "images") || p == filepath.Join(d.StateDir, "images-mem")):
			return fs.SkipDir
		}
		if e.Type().IsRegular() {
			if b, err := os.ReadFile(p); err == nil && (bytes.Contains(b, []byte(v1)) || bytes.Contains(b, []byte(v2))) {
				t.Errorf("%s holds a secret value", p)
			}
		}
		return nil
	})
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
