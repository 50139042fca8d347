package gvisor_test

import (
	"os"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// The default root shows TLS clients the host's CA certificates and openssl.cnf, never
// /etc/ssl/private (the host's TLS private keys).
func TestHostSSLPrivateNotVisible(t *testing.T) {
	h := newHarness(t, nil)
	rec, err := h.m.Create(tctx(t), sandbox.CreateOptions{Name: "ssl"})
	if err != nil {
		t.Fatal(err)
	}
	out := h.sh(t, rec.ID, "ls -a /etc/ssl; if [ -e /etc/ssl/private ]; then echo PRIVATE-VISIBLE; fi")
	if strings.Contains(out, "PRIVATE-VISIBLE") || strings.Contains(out, "private") {
		t.Errorf("/etc/ssl/private exists inside the sandbox; /etc/ssl lists:\n%s", out)
	}
	if _, err := os.Stat("/etc/ssl/certs"); err == nil {
		if n := strings.TrimSpace(h.sh(t, rec.ID, "ls /etc/ssl/certs | wc -l")); n == "0" {
			t.Errorf("/etc/ssl/certs is empty inside the sandbox; TLS clients need it")
		}
	}
}

// A bad rootfs is refused before anything starts and leaves no record holding the name.
func TestCreateBadRootfsLeavesNothing(t *testing.T) {
	h := newHarness(t, nil)
	empty := t.TempDir()
	for _, dir := range []string{"relative/root", empty, "/nonexistent/zygo-root"} {
		_, err := h.m.Create(tctx(t), sandbox.CreateOptions{Name: "bad", RootfsDir: dir})
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), dir) {
			t.Errorf("Create rootfs %q = %v, want invalid argument naming it", dir, err)
		}
	}
	if recs, _ := h.m.List(tctx(t)); len(recs) != 0 {
		t.Errorf("records left after failed creates: %+v", recs)
	}
	if ids, _ := h.be.List(tctx(t)); len(ids) != 0 {
		t.Errorf("engine instances left after failed creates: %v", ids)
	}
}
