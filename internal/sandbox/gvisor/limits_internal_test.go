package gvisor

import (
	"runtime"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/zygo-run/zygo/internal/sandbox"
)

// The bundle carries the limits as runsc reads them: linux.resources for the host cgroup
// (memory, memory+swap, a pids backstop, CPU quota), RLIMIT_NPROC for the tasks inside, and a
// cgroup path per instance; a spec without limits (a record from before them) only the path.
func TestBundleLimits(t *testing.T) {
	b := &Backend{cgroupParent: DefaultCgroupParent, memsw: true, rootfs: "/nonexistent", guestBin: "/nonexistent"}
	s := b.bundleSpec(sandbox.Spec{ID: "sb-x-1", Limits: sandbox.Limits{MemoryMiB: 256, PIDs: 128, CPUs: 1.5}}, "/h")
	if s.Linux.CgroupsPath != "/zygo-sandboxes/sb-x-1" {
		t.Errorf("cgroupsPath = %q", s.Linux.CgroupsPath)
	}
	r := s.Linux.Resources
	if r == nil || r.Memory == nil || val(r.Memory.Limit) != 256<<20 || val(r.Memory.Swap) != 256<<20 {
		t.Fatalf("memory resources %+v", r)
	}
	if r.CPU == nil || val(r.CPU.Quota) != 150000 || val(r.CPU.Period) != 100000 {
		t.Errorf("cpu resources %+v", r.CPU)
	}
	cpus := min(runtime.NumCPU(), 2)
	if want := int64(128*(cpus+2) + hostPIDsSlack); r.Pids == nil || val(r.Pids.Limit) != want {
		t.Errorf("pids resources %+v, want the backstop %d", r.Pids, want)
	}
	if len(s.Process.Rlimits) != 1 || s.Process.Rlimits[0] != (specs.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: 128, Soft: 128}) {
		t.Errorf("rlimits %+v", s.Process.Rlimits)
	}

	b.memsw = false
	if s := b.bundleSpec(sandbox.Spec{ID: "sb-x-2", Limits: sandbox.Limits{MemoryMiB: 64}}, "/h"); s.Linux.Resources.Memory.Swap != nil ||
		s.Linux.Resources.Pids != nil || s.Linux.Resources.CPU != nil || len(s.Process.Rlimits) != 0 {
		t.Errorf("memory only, host without memsw: %+v, rlimits %+v", s.Linux.Resources, s.Process.Rlimits)
	}
	if s := b.bundleSpec(sandbox.Spec{ID: "sb-x-3"}, "/h"); s.Linux.Resources != nil || len(s.Process.Rlimits) != 0 ||
		s.Linux.CgroupsPath != "/zygo-sandboxes/sb-x-3" {
		t.Errorf("no limits: resources %+v, rlimits %+v, path %q", s.Linux.Resources, s.Process.Rlimits, s.Linux.CgroupsPath)
	}
}

// val returns *p, or the zero value for nil.
func val[T any](p *T) T {
	var z T
	if p == nil {
		return z
	}
	return *p
}
