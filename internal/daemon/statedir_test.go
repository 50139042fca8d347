package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/daemon"
)

// A root daemon refuses a state dir another local user could change (the
// attack: a user makes it 0777, the daemon's socket is then theirs to
// swap), one under such a dir (existing or to be made), and one holding an entry another user put
// there; the error names the path and the owner, and nothing is left
// listening.
func TestStartRefusedOnAStateDirAnotherUserControls(t *testing.T) {
	requireBwrap(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: it chowns state dirs to another uid")
	}
	const other = 12345
	chown := func(p string) {
		if err := os.Chown(p, other, other); err != nil {
			t.Fatal(err)
		}
	}
	mk := func(p string, mode os.FileMode) string {
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, setup := range map[string]func(dir string) (state, want string){
		"owned by another uid": func(dir string) (string, string) {
			s := mk(filepath.Join(dir, "st"), 0o777)
			mk(filepath.Join(s, "agents"), 0o777)
			chown(s)
			return s, s + " is owned by uid 12345"
		},
		"under a dir of another uid": func(dir string) (string, string) {
			p := mk(filepath.Join(dir, "home"), 0o755)
			chown(p)
			return filepath.Join(p, "st"), p + " is owned by uid 12345"
		},
		"made under a dir of another uid": func(dir string) (string, string) {
			p := mk(filepath.Join(dir, "home"), 0o755)
			chown(p)
			return filepath.Join(p, "a", "st"), p + " is owned by uid 12345"
		},
		"an entry of another uid": func(dir string) (string, string) {
			s := mk(filepath.Join(dir, "st"), 0o711)
			v := mk(filepath.Join(s, "versions"), 0o755)
			chown(v)
			return s, v + " is owned by uid 12345"
		},
	} {
		dir := stateDir(t)
		state, want := setup(dir)
		ctx, cancel := context.WithCancel(context.Background())
		err := daemon.Run(ctx, config(t, state), func() { t.Errorf("%s: the daemon started", name); cancel() })
		cancel()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a refusal naming %q", name, err, want)
		}
		if _, err := os.Lstat(daemon.SocketPath(state)); err == nil {
			t.Errorf("%s: the refused daemon left its socket", name)
		}
		if _, err := os.Lstat(filepath.Join(state, "zygo.db")); err == nil {
			t.Errorf("%s: the refused daemon created its database", name)
		}
	}
}

// A state dir the daemon makes itself directly under a sticky root-owned dir (like /tmp) is
// fine: others cannot rename what is in it.
func TestStateDirMadeUnderAStickyDir(t *testing.T) {
	requireBwrap(t)
	sticky := stateDir(t)
	if err := os.Chmod(sticky, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	d := start(t, config(t, filepath.Join(sticky, "st")))
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
}
