//go:build linux

package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// parsedServe returns `zygo serve` with args parsed (the root's persistent flags merged in),
// and the globals its flags are bound to.
func parsedServe(t *testing.T, args ...string) (*cobra.Command, *globals) {
	t.Helper()
	g := &globals{}
	root := newRootCmd(g)
	serve, _, err := root.Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	return serve, g
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServeConfigSetsFlags: each key sets the flag of its name, whatever its type; a flag on
// the command line wins over the file.
func TestServeConfigSetsFlags(t *testing.T) {
	p := writeConfig(t, `
state-dir = "/srv/zygo-test"
run-tmpfs-mib = 512
ready-timeout = "90s"
debug = true
network-dns = ["192.0.2.1", "192.0.2.2"]
listen = "127.0.0.1:7000"
`)
	serve, g := parsedServe(t, "--listen", "127.0.0.1:8000")
	if err := applyServeConfig(serve.Flags(), p); err != nil {
		t.Fatal(err)
	}
	get := func(name string) string { return serve.Flags().Lookup(name).Value.String() }
	if g.stateDir != "/srv/zygo-test" {
		t.Errorf("state-dir = %q, want the file's /srv/zygo-test", g.stateDir)
	}
	for name, want := range map[string]string{
		"run-tmpfs-mib": "512", "ready-timeout": (90 * time.Second).String(), "debug": "true",
		"network-dns": "[192.0.2.1,192.0.2.2]",
		"listen":      "127.0.0.1:8000", // the command line's, not the file's
	} {
		if got := get(name); got != want {
			t.Errorf("--%s = %q, want %q", name, got, want)
		}
	}
}

// TestServeConfigStateDirEnv: $ZYGO_STATE_DIR wins over the file's state-dir, as --state-dir does.
func TestServeConfigStateDirEnv(t *testing.T) {
	t.Setenv("ZYGO_STATE_DIR", "/srv/from-env")
	serve, g := parsedServe(t)
	if err := applyServeConfig(serve.Flags(), writeConfig(t, "state-dir = \"/srv/from-file\"\n")); err != nil {
		t.Fatal(err)
	}
	if got := g.resolveStateDir(); got != "/srv/from-env" {
		t.Errorf("state dir %q, want $ZYGO_STATE_DIR's /srv/from-env", got)
	}
}

// TestServeConfigKeysAreServeFlags: the key set is serve's flag set, so a flag added to serve
// is a key with no other change; --config, --help and the client's --addr are not keys.
func TestServeConfigKeysAreServeFlags(t *testing.T) {
	serve, _ := parsedServe(t)
	keys := ConfigKeys(serve.Flags())
	for _, want := range []string{"state-dir", "listen", "run-tmpfs-mib", "no-sandboxes", "network-forbid"} {
		if !slices.Contains(keys, want) {
			t.Errorf("keys %v lack %q", keys, want)
		}
	}
	for _, not := range []string{"config", "help", "addr"} {
		if slices.Contains(keys, not) {
			t.Errorf("keys %v hold %q", keys, not)
		}
	}
	var later int
	serve.Flags().IntVar(&later, "added-later", 1, "a flag another change adds")
	if err := applyServeConfig(serve.Flags(), writeConfig(t, "added-later = 7\n")); err != nil || later != 7 {
		t.Errorf("a new flag as a key: err %v, value %d; want nil, 7", err, later)
	}
}

// TestServeConfigBadInput: every bad file is refused, naming the file and the key.
func TestServeConfigBadInput(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"no-such-flag = 1\n", `unknown key "no-such-flag"`},
		{"addr = \"127.0.0.1:1\"\n", `unknown key "addr"`},
		{"config = \"/x\"\n", `unknown key "config"`},
		{"run-tmpfs-mib = \"big\"\n", "run-tmpfs-mib: must be an integer"},
		{"debug = \"yes\"\n", "debug: must be true or false"},
		{"ready-timeout = 60\n", "ready-timeout: must be a duration as a string"},
		{"ready-timeout = \"soon\"\n", `ready-timeout: "soon" is not a valid value`},
		{"network-dns = \"192.0.2.1\"\n", "network-dns: must be an array of strings"},
		{"network-dns = [1]\n", "network-dns: must be an array of strings"},
		{"listen = 7000\n", "listen: must be a string"},
		{"[network]\npool = \"10.0.0.0/16\"\n", `unknown key "network"`},
		{"run-tmpfs-mib = 1\nrun-tmpfs-mib = 2\n", "has already been defined"},
		{"listen = \n", "line 1"},
	} {
		p := writeConfig(t, tc.body)
		serve, _ := parsedServe(t)
		err := applyServeConfig(serve.Flags(), p)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%q: err %v, want one naming %s and saying %q", tc.body, err, p, tc.want)
		}
	}
	serve, _ := parsedServe(t)
	missing := filepath.Join(t.TempDir(), "none.toml")
	if err := applyServeConfig(serve.Flags(), missing); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("--config naming a missing file: err %v, want no such file", err)
	}
}

// TestServeConfigStopsTheDaemon runs `zygo serve --config` for real: a bad key stops it
// before it starts, and a value from the file reaches the daemon's own checks, which name it.
func TestServeConfigStopsTheDaemon(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	code, _, stderr := runCLI(t, "serve", "--state-dir", state, "--config", writeConfig(t, "run-tmpfs = 5\n"))
	if code != 1 || !strings.Contains(stderr, `unknown key "run-tmpfs"`) {
		t.Errorf("unknown key: exit %d, stderr %q; want 1 naming the key", code, stderr)
	}
	code, _, stderr = runCLI(t, "serve", "--state-dir", state, "--config", writeConfig(t, "run-tmpfs-mib = -5\n"))
	if code != 1 || !strings.Contains(stderr, "--run-tmpfs-mib -5") {
		t.Errorf("bad value: exit %d, stderr %q; want 1 naming run-tmpfs-mib", code, stderr)
	}
	for _, c := range []struct{ config, want string }{
		{"keep-versions = 0\n", "--keep-versions 0: must be 1..1000"},
		{"checkpoint-import-max-mib = 0\n", "--checkpoint-import-max-mib 0: must be a positive number of MiB"},
		{"checkpoint-import-max-mib = -1\n", "--checkpoint-import-max-mib -1: must be a positive number of MiB"},
		{"secret-images-mib = 0\n", "--secret-images-mib 0: must be a positive number of MiB"},
		{"run-tmpfs-mib = 0\n", "--run-tmpfs-mib 0: must be a positive number of MiB"},
		{"ca = \"/x\"\n", `unknown key "ca"`},
	} {
		code, _, stderr = runCLI(t, "serve", "--state-dir", state, "--config", writeConfig(t, c.config))
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("config %q: exit %d, stderr %q; want 1 and %q", c.config, code, stderr, c.want)
		}
	}
	// 0 given as a flag is refused as -1 is (it used to mean the default 8192 silently).
	code, _, stderr = runCLI(t, "serve", "--state-dir", state, "--config", writeConfig(t, ""), "--checkpoint-import-max-mib", "0")
	if code != 1 || !strings.Contains(stderr, "--checkpoint-import-max-mib 0: must be a positive number of MiB") {
		t.Errorf("--checkpoint-import-max-mib 0: exit %d, stderr %q; want 1 naming the flag", code, stderr)
	}
	if _, err := os.Stat(state); err == nil {
		t.Errorf("a refused daemon made its state dir %s", state)
	}
}

// TestServeConfigUntrustedFile: a config file another user could change (writable by its group
// or others, owned by another uid, or in such a directory) stops `zygo serve` before it reads a
// key, naming the file and why; so does a runsc it names that others may write.
func TestServeConfigUntrustedFile(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	for _, tc := range []struct {
		why    string
		change func(p string) error
	}{
		{"writable by its group or by others", func(p string) error { return os.Chmod(p, 0o666) }},
		{"owned by uid 65534", func(p string) error { return os.Chown(p, 65534, 65534) }},
		{"writable by its group or by others", func(p string) error { return os.Chmod(filepath.Dir(p), 0o777) }},
	} {
		p := writeConfig(t, "run-tmpfs-mib = 64\n")
		if err := tc.change(p); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := runCLI(t, "serve", "--state-dir", state, "--config", p)
		if code != 1 || !strings.Contains(stderr, "config file "+p) || !strings.Contains(stderr, tc.why) {
			t.Errorf("%s: exit %d, stderr %q; want 1 naming the file and saying %q", p, code, stderr, tc.why)
		}
	}
	runsc := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(runsc, []byte("#!/bin/sh\n"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(runsc, 0o777); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "serve", "--state-dir", state, "--config", writeConfig(t, "runsc = \""+runsc+"\"\n"))
	if code != 1 || !strings.Contains(stderr, "--runsc "+runsc) || !strings.Contains(stderr, "writable by its group or by others") {
		t.Errorf("runsc = %s (mode 0777): exit %d, stderr %q; want 1 naming --runsc and the file", runsc, code, stderr)
	}
	// 0 given as a flag is refused as -1 is (it used to mean the default 8192 silently).
	code, _, stderr = runCLI(t, "serve", "--state-dir", state, "--config", writeConfig(t, ""), "--checkpoint-import-max-mib", "0")
	if code != 1 || !strings.Contains(stderr, "--checkpoint-import-max-mib 0: must be a positive number of MiB") {
		t.Errorf("--checkpoint-import-max-mib 0: exit %d, stderr %q; want 1 naming the flag", code, stderr)
	}
	if _, err := os.Stat(state); err == nil {
		t.Errorf("a refused daemon made its state dir %s", state)
	}
}

// TestServeCPUProfileRefusesAnExistingFile: --cpuprofile only creates a new file (0600), so
// it cannot make root truncate one; an existing file or a symbolic link stops the daemon and is
// left as it was.
func TestServeCPUProfileRefusesAnExistingFile(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(filepath.Join(dir, "new-through-link"), link); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	for _, p := range []string{victim, link} {
		code, _, stderr := runCLI(t, "serve", "--state-dir", state, "--cpuprofile", p)
		if code != 1 || !strings.Contains(stderr, "--cpuprofile "+p) {
			t.Errorf("--cpuprofile %s: exit %d, stderr %q; want 1 naming the flag and the file", p, code, stderr)
		}
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me" {
		t.Errorf("the existing file now holds %q (%v), want it untouched", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "new-through-link")); err == nil {
		t.Error("--cpuprofile followed a symbolic link")
	}
	stop, err := startCPUProfile(filepath.Join(dir, "new.prof"))
	if err != nil {
		t.Fatalf("--cpuprofile naming a new file: %v", err)
	}
	stop()
	if fi, err := os.Stat(filepath.Join(dir, "new.prof")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the new profile: %v, err %v; want mode 0600", fi, err)
	}
}
