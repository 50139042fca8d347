package gvisor

import (
	"encoding/json"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/sandbox"
)

var updateBundles = flag.Bool("update-bundles", false, "rewrite testdata/bundle-*.json from today's bundleSpec")

// bundleCases are the bundles compared with testdata/bundle-NAME.json, which the hand-written
// OCI structs of before specs-go wrote (go test -run TestBundleJSON -update-bundles rewrites
// them). hostBinds is pinned to /usr so that the default root's case is the same on every
// host; CPUs 1.5 makes the host pids limit PIDs*(2+2)+slack wherever there are 2 CPUs or more.
var bundleCases = []struct {
	name  string
	memsw bool
	spec  sandbox.Spec
}{
	{"default-root", false, sandbox.Spec{ID: "sb-1-a", Hostname: "sb-1-a"}},
	{"limits-hostuid", true, sandbox.Spec{ID: "sb-2-b", Hostname: "sb-2-b", RootfsDir: "/srv/root", HostUID: 1879048200,
		Limits: sandbox.Limits{MemoryMiB: 256, PIDs: 64, CPUs: 1.5}}},
	{"memory-only", false, sandbox.Spec{ID: "sb-3-c", Hostname: "sb-3-c", RootfsDir: "/srv/root",
		Limits: sandbox.Limits{MemoryMiB: 512}}},
}

func testBundleBackend(memsw bool) *Backend {
	return &Backend{rootfs: "/state/rootfs", guestBin: "/state/bin/zygo-guest", cgroupParent: "/zygo", memsw: memsw,
		log: slog.New(slog.DiscardHandler)}
}

// asRunscReadsIt decodes data as runsc does: into the runtime-spec's own types.
func asRunscReadsIt(t *testing.T, data []byte) specs.Spec {
	t.Helper()
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestBundleJSON: the config.json runsc gets decodes, in runsc's own types, to the same spec
// as the one the hand-written structs wrote before (testdata), case by case.
func TestBundleJSON(t *testing.T) {
	old := hostBinds
	hostBinds = []string{"/usr"}
	t.Cleanup(func() { hostBinds = old })
	for _, c := range bundleCases {
		t.Run(c.name, func(t *testing.T) {
			got, err := json.MarshalIndent(testBundleBackend(c.memsw).bundleSpec(c.spec, "/state/instances/"+c.spec.ID+"/host"), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "bundle-"+c.name+".json")
			if *updateBundles {
				if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := asRunscReadsIt(t, got), asRunscReadsIt(t, want); !reflect.DeepEqual(g, w) {
				t.Errorf("config.json differs from %s as runsc reads it:\ngot  %s\nwant %s", golden, got, want)
			}
		})
	}
}

// TestImageBundleOfOlderZygo: an image whose zygo-bundle.json the hand-written structs wrote
// restores with today's bundle (per-copy fields aside), and one of other limits is refused.
func TestImageBundleOfOlderZygo(t *testing.T) {
	old := hostBinds
	hostBinds = []string{"/usr"}
	t.Cleanup(func() { hostBinds = old })
	c := bundleCases[1]
	data, err := os.ReadFile(filepath.Join("testdata", "bundle-"+c.name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	img := t.TempDir()
	if err := os.WriteFile(filepath.Join(img, imageBundle), data, 0o600); err != nil {
		t.Fatal(err)
	}
	b := testBundleBackend(c.memsw)
	copySpec := c.spec
	copySpec.ID, copySpec.Hostname, copySpec.HostUID = "sb-9-z", "sb-9-z", 1879048299 // a copy's own
	if err := b.checkImageBundle(img, copySpec); err != nil {
		t.Errorf("restoring an older zygo's image with its own limits: %v", err)
	}
	copySpec.Limits.MemoryMiB *= 2
	if err := b.checkImageBundle(img, copySpec); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("restoring with other limits = %v, want failed_precondition", err)
	}
}
