package zygo

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDefaultSocketFollowsStateDir: without $ZYGO_STATE_DIR the socket is zygo.sock in the
// daemon's default state dir: /var/lib/zygo for root, $XDG_STATE_HOME/zygo (else
// ~/.local/state/zygo) for a user, as `zygo serve` and the CLI use.
func TestDefaultSocketFollowsStateDir(t *testing.T) {
	t.Setenv("ZYGO_STATE_DIR", "/srv/zygo-x")
	if got := DefaultSocket(); got != "/srv/zygo-x/zygo.sock" {
		t.Errorf("with $ZYGO_STATE_DIR: %q", got)
	}
	t.Setenv("ZYGO_STATE_DIR", "")
	xdg := t.TempDir()
	t.Setenv("XDG_STATE_HOME", xdg)
	if got, want := defaultSocket(1000), filepath.Join(xdg, "zygo", "zygo.sock"); got != want {
		t.Errorf("a user's socket = %q, want %q", got, want)
	}
	if got := defaultSocket(0); got != "/var/lib/zygo/zygo.sock" {
		t.Errorf("root's socket = %q", got)
	}
	t.Setenv("XDG_STATE_HOME", "")
	home, _ := os.UserHomeDir()
	if got, want := defaultSocket(1000), filepath.Join(home, ".local", "state", "zygo", "zygo.sock"); got != want {
		t.Errorf("without $XDG_STATE_HOME: %q, want %q", got, want)
	}
	if got, want := DefaultSocket(), filepath.Join(DefaultStateDir(), "zygo.sock"); got != want {
		t.Errorf("DefaultSocket() = %q, want it in DefaultStateDir() (%q)", got, want)
	}
}

// TestUnreachableNamesTheAddress: a TCP client that reaches no daemon says which address it
// tried and points at --listen, not at --state-dir (which TCP does not use).
func TestUnreachableNamesTheAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	_, err = NewTCPClient(addr, "").Status(context.Background())
	var un *Unreachable
	if !errors.As(err, &un) {
		t.Fatalf("Status = %v (%T), want *Unreachable", err, err)
	}
	if msg := un.Error(); !strings.Contains(msg, addr) || !strings.Contains(msg, "--listen") || strings.Contains(msg, "--state-dir") {
		t.Errorf("TCP: %q: want the address and --listen, not --state-dir", msg)
	}
	sock := filepath.Join(t.TempDir(), "zygo.sock")
	_, err = NewClient(sock).Status(context.Background())
	if !errors.As(err, &un) || !strings.Contains(un.Error(), "--state-dir") || un.Socket != sock {
		t.Errorf("unix: %v (%T), want *Unreachable naming --state-dir", err, err)
	}
}

// TestPackDirRefusesAFile: a zygo.toml given for its directory is refused with what to
// give, not packed as an empty bundle that the daemon refuses for lacking a zygo.toml.
func TestPackDirRefusesAFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "zygo.toml")
	if err := os.WriteFile(f, []byte("name = \"x\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	if err := PackDir(f, &buf); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("PackDir(a file) = %v, want not a directory", err)
	}
}
