package sandbox

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// specRecorder is a fakeBackend that remembers the spec of every Create and Restore.
type specRecorder struct {
	*fakeBackend
	mu       sync.Mutex // guards created, restored
	created  []Spec
	restored []Spec
}

func newSpecRecorder() *specRecorder {
	r := &specRecorder{fakeBackend: newFake()}
	r.failRestore = func(spec Spec) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.restored = append(r.restored, spec)
		return nil
	}
	return r
}

func (r *specRecorder) Create(ctx context.Context, spec Spec) (*Instance, error) {
	r.mu.Lock()
	r.created = append(r.created, spec)
	r.mu.Unlock()
	return r.fakeBackend.Create(ctx, spec)
}

func TestValidateLimits(t *testing.T) {
	for _, tc := range []struct {
		opts CreateOptions
		bad  string // substring of the error; "" when valid
	}{
		{CreateOptions{}, ""},
		{CreateOptions{MemoryMiB: 64, PIDs: 32, CPUs: 0.01}, ""},
		{CreateOptions{MemoryMiB: 2048, PIDs: 4096, CPUs: 1}, ""},
		{CreateOptions{MemoryMiB: 63}, "memory_mib 63"},
		{CreateOptions{MemoryMiB: -1}, "memory_mib -1"},
		{CreateOptions{MemoryMiB: 1 << 40}, "to this host's memory"},
		{CreateOptions{PIDs: 31}, "pids 31"},
		{CreateOptions{PIDs: -5}, "pids -5"},
		{CreateOptions{PIDs: MaxPIDs + 1}, "pids 4194305"},
		{CreateOptions{CPUs: 0.001}, "cpus 0.001"},
		{CreateOptions{CPUs: -1}, "cpus -1"},
		{CreateOptions{CPUs: 1e6}, "cpus 1e+06"},
		{CreateOptions{CPUs: math.NaN()}, "cpus NaN"},
		{CreateOptions{CPUs: math.Inf(1)}, "cpus +Inf"},
	} {
		err := ValidateLimits(tc.opts)
		if tc.bad == "" {
			if err != nil {
				t.Errorf("ValidateLimits(%+v) = %v, want nil", tc.opts, err)
			}
			continue
		}
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.bad) {
			t.Errorf("ValidateLimits(%+v) = %v, want an invalid argument naming %q", tc.opts, err, tc.bad)
		}
	}
}

func TestWithDefaults(t *testing.T) {
	got := CreateOptions{Name: "x"}.WithDefaults()
	if want := min(DefaultMemoryMiB, hostMemoryMiB()); got.MemoryMiB != want || got.PIDs != DefaultPIDs || got.CPUs != 0 || got.Name != "x" {
		t.Errorf("defaults = %+v, want memory %d, pids %d, no CPU quota", got, want, DefaultPIDs)
	}
	set := CreateOptions{MemoryMiB: 256, PIDs: 128, CPUs: 1.5}
	if got := set.WithDefaults(); got.Limits() != set.Limits() {
		t.Errorf("given limits changed: %+v", got.Limits())
	}
}

// Limits are checked before anything is made, stored with their defaults, handed to the
// backend at create, and every fork child and rollback is restored with the limits of the
// checkpoint's sandbox.
func TestLimitsReachEveryCopy(t *testing.T) {
	ctx := context.Background()
	be, reg := newSpecRecorder(), NewMemRegistry()
	m := newTestManager(t, be, reg, nil)

	if _, err := m.Create(ctx, CreateOptions{Name: "bad", MemoryMiB: 10}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("Create with 10 MiB = %v, want invalid argument", err)
	}
	if recs, _ := reg.ListSandboxes(ctx); len(recs) != 0 || len(be.created) != 0 {
		t.Fatalf("a refused create left %d records, %d creates", len(recs), len(be.created))
	}

	def, err := m.Create(ctx, CreateOptions{Name: "def"})
	if err != nil {
		t.Fatal(err)
	}
	if def.Options.MemoryMiB == 0 || def.Options.PIDs != DefaultPIDs || def.Options.CPUs != 0 {
		t.Errorf("record of a create without limits has %+v, want the defaults", def.Options.Limits())
	}
	if got := be.created[0].Limits; got != def.Options.Limits() {
		t.Errorf("backend got %+v, record has %+v", got, def.Options.Limits())
	}

	want := Limits{MemoryMiB: 256, PIDs: 128, CPUs: 1.5}
	src, err := m.Create(ctx, CreateOptions{Name: "src", MemoryMiB: 256, PIDs: 128, CPUs: 1.5})
	if err != nil {
		t.Fatal(err)
	}
	if got := be.created[1].Limits; got != want || src.Options.Limits() != want {
		t.Fatalf("create: backend got %+v, record %+v, want %+v", got, src.Options.Limits(), want)
	}
	cp, err := m.Checkpoint(ctx, "src", "base")
	if err != nil {
		t.Fatal(err)
	}
	if cp.Options.Limits() != want {
		t.Errorf("checkpoint record has %+v, want %+v", cp.Options.Limits(), want)
	}
	res, err := m.Fork(ctx, "src", ForkOptions{N: 2, From: cp.ID})
	if err != nil || len(res.Children) != 2 {
		t.Fatalf("Fork = %+v, %v", res, err)
	}
	for _, c := range res.Children {
		if c.Sandbox.Options.Limits() != want {
			t.Errorf("child %s record has %+v, want %+v", c.Sandbox.ID, c.Sandbox.Options.Limits(), want)
		}
	}
	// A rollback restores the image with the limits recorded with it.
	rb, err := m.Rollback(ctx, "src", cp.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rb.Options.Limits() != want {
		t.Errorf("rollback record has %+v, want %+v", rb.Options.Limits(), want)
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	if len(be.restored) != 3 {
		t.Fatalf("%d restores, want 3 (2 children, 1 rollback)", len(be.restored))
	}
	for _, s := range be.restored {
		if s.Limits != want {
			t.Errorf("restore of %s got limits %+v, want %+v", s.ID, s.Limits, want)
		}
	}
}
