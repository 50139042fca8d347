package gvisor

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// A spec with a host uid gives runsc a user namespace that maps the guest's root, and
// nothing else, to that uid; without one the bundle has no user namespace (runsc's default).
func TestBundleUserNamespace(t *testing.T) {
	b := &Backend{cgroupParent: DefaultCgroupParent, rootfs: "/nonexistent", guestBin: "/nonexistent"}
	s := b.bundleSpec(sandbox.Spec{ID: "sb-x-1", HostUID: 1879048200}, "/h")
	want := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 1879048200, Size: 1}}
	if len(s.Linux.UIDMappings) != 1 || s.Linux.UIDMappings[0] != want[0] || len(s.Linux.GIDMappings) != 1 || s.Linux.GIDMappings[0] != want[0] {
		t.Errorf("mappings %+v %+v, want %+v", s.Linux.UIDMappings, s.Linux.GIDMappings, want)
	}
	if n := s.Linux.Namespaces[len(s.Linux.Namespaces)-1]; n.Type != "user" {
		t.Errorf("namespaces %+v, want a user namespace", s.Linux.Namespaces)
	}
	for _, n := range b.bundleSpec(sandbox.Spec{ID: "sb-x-1"}, "/h").Linux.Namespaces {
		if n.Type == "user" {
			t.Errorf("a spec without a host uid has a user namespace")
		}
	}
}

// A restore may differ from the image's bundle in what each copy has of its own (id,
// hostname, cgroup, host dir, host uid) and in nothing else.
func TestImageBundleCheck(t *testing.T) {
	b := &Backend{cgroupParent: DefaultCgroupParent, rootfs: "/nonexistent", guestBin: "/nonexistent", log: slog.Default()}
	img, inst := t.TempDir(), t.TempDir()
	src := sandbox.Spec{ID: "sb-a-1", Hostname: "sb-a-1", HostUID: 1879048200, Limits: sandbox.Limits{MemoryMiB: 256}}
	if err := writeJSON(filepath.Join(inst, "config.json"), b.bundleSpec(src, "/a/host"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := saveImageBundle(inst, img); err != nil {
		t.Fatal(err)
	}
	copySpec := sandbox.Spec{ID: "sb-b-2", Hostname: "sb-b-2", HostUID: 1879048201, Limits: src.Limits}
	if err := b.checkImageBundle(img, copySpec); err != nil {
		t.Errorf("a copy with its own id, hostname, cgroup, host dir and uid: %v", err)
	}
	other := copySpec
	other.Limits.MemoryMiB = 512
	if err := b.checkImageBundle(img, other); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("a copy with other limits: %v, want ErrFailedPrecondition", err)
	}
	other = copySpec
	other.RootfsDir = "/elsewhere"
	if err := b.checkImageBundle(img, other); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("a copy with another root: %v, want ErrFailedPrecondition", err)
	}
	if err := b.checkImageBundle(t.TempDir(), other); err != nil {
		t.Errorf("an image without a saved bundle: %v, want it restored unchecked", err)
	}
	// An image imported from another daemon names that engine's copies of the default root and the guest.
	elsewhere := &Backend{cgroupParent: DefaultCgroupParent, rootfs: "/other/state/rootfs", guestBin: "/other/gv/bin/zygo-guest", log: slog.Default()}
	if err := elsewhere.checkImageBundle(img, copySpec); err != nil {
		t.Errorf("an image of another engine's default root: %v", err)
	}
	other = copySpec
	other.RootfsDir = "/nonexistent" // the image's root path, given: still the default root's binds differ
	if err := elsewhere.checkImageBundle(img, other); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("a given root for an image of the default root: %v, want ErrFailedPrecondition", err)
	}
}

// An imported image (Spec.ImageImported) must carry its bundle; its root's path is each
// daemon's own (a template's directory there), and everything else must match.
func TestImportedImageBundle(t *testing.T) {
	b := &Backend{cgroupParent: DefaultCgroupParent, rootfs: "/nonexistent", guestBin: "/nonexistent", log: slog.Default()}
	img, inst := t.TempDir(), t.TempDir()
	src := sandbox.Spec{ID: "sb-a-1", Hostname: "sb-a-1", RootfsDir: "/exporter/templates/py", Limits: sandbox.Limits{MemoryMiB: 256}}
	if err := writeJSON(filepath.Join(inst, "config.json"), b.bundleSpec(src, "/a/host"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := saveImageBundle(inst, img); err != nil {
		t.Fatal(err)
	}
	here := sandbox.Spec{ID: "sb-b-2", Hostname: "sb-b-2", RootfsDir: "/importer/templates/py", Limits: src.Limits, ImageImported: true}
	if err := b.CheckImportedImage(img, here); err != nil {
		t.Errorf("an imported image on this daemon's directory of its template: %v", err)
	}
	if err := b.checkImageBundle(t.TempDir(), here); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), imageBundle) {
		t.Errorf("an imported image without its bundle: %v, want ErrFailedPrecondition naming %s", err, imageBundle)
	}
	if err := b.CheckImportedImage(t.TempDir(), sandbox.Spec{ID: "sb-b-2"}); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("CheckImportedImage of an image without its bundle: %v, want ErrFailedPrecondition", err)
	}
	other := here
	other.RootfsDir = "" // the default root: its binds are not in the image's bundle
	if err := b.CheckImportedImage(img, other); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("an imported image of a template restored on the default root: %v, want ErrFailedPrecondition", err)
	}
	other = here
	other.Limits.MemoryMiB = 512
	if err := b.CheckImportedImage(img, other); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("an imported image with other limits: %v, want ErrFailedPrecondition", err)
	}
}
