package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func (d *Daemon) setSecret(t *testing.T, name, value string) {
	t.Helper()
	cmd := exec.Command(zygoBin, "--state-dir", d.StateDir, "secret", "set", name)
	cmd.Stdin = strings.NewReader(value + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), value) {
		t.Fatalf("zygo secret set: %v %s", err, out)
	}
}

func secretFilesLeft(t *testing.T, stateDir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(stateDir, "run", "*", "secrets", "*"))
	return m
}

func TestSecrets(t *testing.T) {
	d := startDaemon(t, "")
	// Deploying a function that names an unknown secret fails, naming it.
	_, errOut, code := d.CLI("up", fixture("secretfn"))
	if code == 0 || !strings.Contains(errOut, `"API_KEY"`) {
		t.Fatalf("deploy with an unknown secret: exit %d %q", code, errOut)
	}
	d.setSecret(t, "API_KEY", "s3cr3t-one")
	d.Up(fixture("secretfn"))
	d.Up(fixture("nosecretfn"))

	var atImport []string
	d.Invoke("secretfn", map[string]any{"action": "import"}, &atImport)
	if len(atImport) != 0 {
		t.Errorf("import-time code saw secrets: %v", atImport)
	}
	var r struct {
		Value    string
		Mode     string
		UID      int
		EnvHasIt bool `json:"env_has_it"`
	}
	d.Invoke("secretfn", map[string]any{"action": "read"}, &r)
	if r.Value != "s3cr3t-one" || r.Mode != "0o400" || r.UID != 1000 || r.EnvHasIt {
		t.Errorf("reading the secret: %+v", r)
	}
	if left := secretFilesLeft(t, d.StateDir); len(left) != 0 {
		t.Errorf("secret files left after the last request: %v", left)
	}
	var other map[string][]string
	d.Invoke("nosecretfn", map[string]any{}, &other)
	for p, found := range other {
		if len(found) != 0 {
			t.Errorf("another function found %s: %v", p, found)
		}
	}

	// Rotation reaches the next request.
	d.setSecret(t, "API_KEY", "s3cr3t-two")
	d.Invoke("secretfn", map[string]any{"action": "read"}, &r)
	if r.Value != "s3cr3t-two" {
		t.Errorf("after rotation the request read %q", r.Value)
	}

	// While a request holds the secret, a shorter one ending does not remove it.
	var wg sync.WaitGroup
	var held string
	wg.Add(1)
	go func() {
		defer wg.Done()
		res, err := d.TryInvoke("secretfn", map[string]any{"action": "hold", "seconds": 2})
		if err == nil {
			held = string(res.Value)
		}
	}()
	time.Sleep(700 * time.Millisecond)
	d.Invoke("secretfn", map[string]any{"action": "read"}, nil)
	wg.Wait()
	if held != `"s3cr3t-two"` {
		t.Errorf("the long request read %q after a short one ended", held)
	}

	// Neither the logs nor error messages carry the value.
	_, err := d.TryInvoke("secretfn", map[string]any{"action": "leak"})
	ae := apiError(t, err)
	if strings.Contains(ae.Message+ae.Traceback, "s3cr3t") || !strings.Contains(ae.Message, "[redacted:API_KEY]") {
		t.Errorf("error message: %+v", ae.ErrorBody)
	}
	logs, _, _ := d.CLI("logs", "secretfn")
	if strings.Contains(logs, "s3cr3t") || !strings.Contains(logs, "the key is [redacted:API_KEY]") {
		t.Errorf("logs:\n%s", logs)
	}
	ls, _, _ := d.CLI("secret", "ls")
	if !strings.Contains(ls, "API_KEY") || strings.Contains(ls, "s3cr3t") {
		t.Errorf("zygo secret ls:\n%s", ls)
	}
	// A value spanning lines (a PEM key) is redacted too.
	d.setSecret(t, "API_KEY", "-----BEGIN KEY-----\ns3cr3t-line-two\n-----END KEY-----")
	d.TryInvoke("secretfn", map[string]any{"action": "leak"})
	logs, _, _ = d.CLI("logs", "secretfn")
	if strings.Contains(logs, "s3cr3t-line-two") {
		t.Errorf("a multi-line secret reached the logs:\n%s", logs)
	}
	// At rest: encrypted, key file 0600.
	db, _ := os.ReadFile(filepath.Join(d.StateDir, "zygo.db"))
	wal, _ := os.ReadFile(filepath.Join(d.StateDir, "zygo.db-wal"))
	if strings.Contains(string(db)+string(wal), "s3cr3t") {
		t.Error("the store holds the secret in plain text")
	}
	if st, err := os.Stat(filepath.Join(d.StateDir, "secret.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("secret.key: %v %v", st.Mode(), err)
	}
	// A secret a deployed function names cannot be removed from under it.
	if _, errOut, code := d.CLI("secret", "rm", "API_KEY"); code == 0 || !strings.Contains(errOut, "secretfn") {
		t.Errorf("removing a secret in use: exit %d %q", code, errOut)
	}
	if _, _, code := d.CLI("rm", "secretfn"); code != 0 {
		t.Fatal("zygo rm secretfn failed")
	}
	if _, _, code := d.CLI("secret", "rm", "API_KEY"); code != 0 {
		t.Error("zygo secret rm failed")
	}
	if _, errOut, code := d.CLI("secret", "rm", "API_KEY"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Errorf("removing a missing secret: exit %d %q", code, errOut)
	}
}
