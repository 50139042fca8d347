package gvisor

import (
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/zygo-run/zygo/internal/cgroup"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// How a sandbox's limits (sandbox.Limits) are enforced, as established on the pinned runsc
// (docs/sandboxes.md, "Limits"):
//
//   - runsc manages cgroups (no --ignore-cgroups). Each instance's bundle names its own
//     cgroup, CgroupParent/ENGINE-ID from the root of every hierarchy (v1 on a hybrid host,
//     since its v2 tree has no controllers; v2 on a unified host), and carries
//     linux.resources; runsc makes the group, sets the limits, starts the Sentry and the gofer
//     in it, and removes it on `runsc delete`. A restore reads its own bundle, so every copy
//     gets a fresh group with the limits its record carries.
//   - Memory: memory.limit_in_bytes (and memsw, so no swap on top, where the host has it).
//     The group holds the Sentry's memory file, so it covers the sandbox's processes and the
//     files of its in-memory root alike. runsc also passes the limit to the Sentry as
//     --total-memory, so /proc/meminfo inside shows it. Past it the host's OOM killer kills
//     the largest process of the group: a guest process's address-space stub (that process
//     dies with SIGKILL, the sandbox lives) or the Sentry (the sandbox dies; WaitExit says
//     so).
//   - PIDs: RLIMIT_NPROC of PID 1, inherited by everything inside; gVisor enforces it per
//     user on every new task (process or thread), so fork and clone fail with EAGAIN past it.
//     A host pids.max is NOT set to the same number: host tasks are not guest tasks (systrap
//     runs a stub process and its threads per guest address space, and the Sentry has its own
//     threads), and a Sentry that cannot make a thread dies. The host limit is a backstop,
//     hostPIDs, for what the rlimit does not see (a process that changes its uid).
//   - CPU: cpu.cfs_quota_us / cpu.cfs_period_us; runsc also lowers the CPUs the guest sees
//     to ceil(quota), at least 2.

// DefaultCgroupParent is the group under which sandboxes' groups are made, from the root of
// every hierarchy. It is not the warm functions' parent (internal/cgroup's /zygo), whose
// cleanup at daemon start kills what is in its groups.
const DefaultCgroupParent = "/zygo-sandboxes"

// cpuPeriodUS is the CFS period of a CPU quota: the kernel's default, 100 ms.
const cpuPeriodUS = 100_000

// hostPIDsSlack is what the Sentry, the gofer and runsc need beside the stubs: the Sentry's Go
// runtime threads and the gofer's.
const hostPIDsSlack = 512

// CgroupPath returns the cgroup (a path from the root of each hierarchy) of instance id.
func (b *Backend) CgroupPath(id string) string { return path.Join(b.cgroupParent, id) }

// applyLimits puts spec's limits into the OCI spec s.
func (b *Backend) applyLimits(s *specs.Spec, spec sandbox.Spec) {
	s.Linux.CgroupsPath = b.CgroupPath(spec.ID)
	l := spec.Limits
	if l.IsZero() {
		return // a record from before limits: its image has no rlimit, the restore must match
	}
	res := &specs.LinuxResources{}
	if l.MemoryMiB > 0 {
		limit := int64(l.MemoryMiB) << 20 // bytes
		res.Memory = &specs.LinuxMemory{Limit: &limit}
		if b.memsw {
			res.Memory.Swap = &limit // memory+swap: the limit, so no swap on top (v1 with memsw only)
		}
	}
	if l.PIDs > 0 {
		pids := hostPIDs(l)
		res.Pids = &specs.LinuxPids{Limit: &pids}
		s.Process.Rlimits = append(s.Process.Rlimits, specs.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: uint64(l.PIDs), Soft: uint64(l.PIDs)})
	}
	if l.CPUs > 0 {
		quota, period := int64(math.Round(l.CPUs*cpuPeriodUS)), uint64(cpuPeriodUS) // microseconds
		res.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	s.Linux.Resources = res
}

// hostPIDs is the host pids.max of a sandbox limited to l.PIDs tasks inside: on systrap each
// guest address space costs a stub process plus up to one thread per Sentry CPU and one
// more, and the Sentry sees at most the host's CPUs (fewer under a quota).
func hostPIDs(l sandbox.Limits) int64 {
	cpus := runtime.NumCPU()
	if l.CPUs > 0 {
		cpus = min(cpus, max(2, int(math.Ceil(l.CPUs))))
	}
	return int64(l.PIDs)*int64(cpus+2) + hostPIDsSlack
}

// cgroupDirs returns the directories of instance id's group that exist now, in every
// hierarchy mounted under /sys/fs/cgroup.
func (b *Backend) cgroupDirs(id string) []string {
	var dirs []string
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	for _, r := range roots {
		d := filepath.Join(r, b.CgroupPath(id))
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// CgroupDirs returns the directories of instance id's cgroup that exist on the host (none
// once the instance is destroyed).
func (b *Backend) CgroupDirs(id string) []string { return b.cgroupDirs(id) }

// limitCause says which limit of instance id was hit, from its cgroup's counters, or "" when
// none was (or the group is gone). The limit comes first ("memory limit of 256 MiB reached:
// ..."), so that a cause cut short for a table still names it. Call it before the group is
// removed.
func (b *Backend) limitCause(id string) string {
	var causes []string
	oom := func(n int64, limitFile string) {
		limit := ""
		if v, err := os.ReadFile(limitFile); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64); err == nil {
				limit = fmt.Sprintf(" of %d MiB", n>>20)
			}
		}
		causes = append(causes, fmt.Sprintf("memory limit%s reached: the kernel's OOM killer killed %d of the sandbox's processes", limit, n))
	}
	mem := filepath.Join("/sys/fs/cgroup/memory", b.CgroupPath(id))
	if n := counter(filepath.Join(mem, "memory.oom_control"), "oom_kill"); n > 0 {
		oom(n, filepath.Join(mem, "memory.limit_in_bytes"))
	}
	if n := counter(filepath.Join("/sys/fs/cgroup/pids", b.CgroupPath(id), "pids.events"), "max"); n > 0 {
		causes = append(causes, fmt.Sprintf("host task limit reached %d times", n))
	}
	// v2 (unified hosts): one directory.
	v2 := filepath.Join("/sys/fs/cgroup", b.CgroupPath(id))
	if n := counter(filepath.Join(v2, "memory.events"), "oom_kill"); n > 0 {
		oom(n, filepath.Join(v2, "memory.max"))
	}
	if n := counter(filepath.Join(v2, "pids.events"), "max"); n > 0 {
		causes = append(causes, fmt.Sprintf("host task limit reached %d times", n))
	}
	return strings.Join(causes, "; ")
}

// counter returns the value of the "key N" line of a cgroup file, or 0 (also when the file
// cannot be read).
func counter(p, key string) int64 {
	kv, _ := cgroup.ReadCounters(p)
	return int64(kv[key])
}

// removeCgroup removes what is left of instance id's cgroup once its container is deleted.
// runsc's delete removes the groups it made (retrying while the kernel still counts the
// killed processes); an empty group can remain when runsc no longer knows the container (its
// state was lost) or when the sandbox never started. It returns an error naming the
// directories that could not be removed.
func (b *Backend) removeCgroup(id string) error {
	var left []string
	for _, d := range b.cgroupDirs(id) {
		if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
			left = append(left, d)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("removing the cgroup of %s: %s still there (processes in it?)", id, strings.Join(left, ", "))
	}
	return nil
}

// removeCgroupParent removes the (shared) parent group from every hierarchy where it is
// empty; a parent that still holds groups, another daemon's, stays.
func (b *Backend) removeCgroupParent() {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	for _, r := range roots {
		_ = os.Remove(filepath.Join(r, b.cgroupParent))
	}
}
