package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBackupRestore backs up a serving daemon with a deployed function and a secret, restores
// the backup onto a fresh state dir, starts a daemon there and invokes the function, which
// reads the secret. A restore is refused while a daemon runs on the state dir and into one
// that is not empty (unless --force), and a damaged backup is refused before anything is
// written.
func TestBackupRestore(t *testing.T) {
	d := startDaemon(t, "")
	d.setSecret(t, "API_KEY", "s3cr3t-backup")
	d.Up(fixture("secretfn"))
	dir := filepath.Join(t.TempDir(), "backup")
	out, stderr, code := d.CLI("backup", dir)
	if code != 0 || !strings.Contains(out, "1 versions, secret key") {
		t.Fatalf("zygo backup: exit %d\nstdout: %s\nstderr: %s", code, out, stderr)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("backup dir: %v, mode %v; want 0700 (it holds the key)", err, st.Mode().Perm())
	}
	var m struct {
		Includes map[string]any
		Files    []struct{ Path string }
	}
	b, err := os.ReadFile(filepath.Join(dir, "zygo-backup.json"))
	if err != nil || json.Unmarshal(b, &m) != nil {
		t.Fatalf("the backup's manifest: %v %s", err, b)
	}
	if m.Includes["store"] != true || m.Includes["secret_key"] != true || m.Includes["checkpoints"] != false {
		t.Errorf("includes %v", m.Includes)
	}
	if _, stderr, code := d.CLI("restore", dir); code == 0 || !strings.Contains(stderr, "a zygo daemon is running on") {
		t.Errorf("restore onto the running daemon's state dir: exit %d, stderr %q", code, stderr)
	}
	d.Stop()
	if _, stderr, code := d.CLI("restore", dir); code == 0 || !strings.Contains(stderr, "is not empty") {
		t.Errorf("restore onto a state dir that is not empty: exit %d, stderr %q", code, stderr)
	}

	fresh, err := os.MkdirTemp("", "zygo-e2e-restored-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(fresh) })
	if err := os.Remove(fresh); err != nil { // restore makes it
		t.Fatal(err)
	}
	p := *d.Process // the CLI of another state dir
	p.StateDir = fresh
	d2 := &Daemon{t: t, Process: &p}
	out, stderr, code = d2.CLI("restore", dir)
	if code != 0 {
		t.Fatalf("zygo restore: exit %d\nstdout: %s\nstderr: %s", code, out, stderr)
	}
	r := startDaemon(t, fresh)
	var got struct{ Value string }
	r.Invoke("secretfn", map[string]any{"action": "read"}, &got)
	if strings.TrimSpace(got.Value) != "s3cr3t-backup" {
		t.Errorf("the restored function read %q, want the secret's value", got.Value)
	}
	r.Stop()

	// A damaged backup is refused, naming the file, before anything is written.
	damaged := m.Files[len(m.Files)-1].Path
	if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(damaged)), []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "state")
	d2.StateDir = empty
	if _, stderr, code := d2.CLI("restore", dir); code == 0 || !strings.Contains(stderr, damaged+" is missing or differs") {
		t.Errorf("restore of a damaged backup: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(empty); err == nil {
		t.Errorf("a refused restore made the state dir")
	}
}
