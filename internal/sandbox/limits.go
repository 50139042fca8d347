package sandbox

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// Defaults and bounds of a sandbox's resource limits (CreateOptions.MemoryMiB, PIDs, CPUs).
// The defaults protect the host: one sandbox cannot take the host's memory or fill its
// process table, while ordinary agent work (a Python interpreter with NumPy, a build, a few
// hundred processes) fits. CPU is not capped by default: it is not used up (a busy sandbox
// slows others, it cannot make them fail), every sandbox has a cgroup of its own so the
// kernel shares the CPU fairly between sandboxes and the daemon, and a quota would throttle
// a sandbox even on an idle host.
const (
	// DefaultMemoryMiB is the memory limit of a sandbox that names none: 2 GiB (or the host's
	// memory, when it has less).
	DefaultMemoryMiB = 2048
	// MinMemoryMiB is the smallest memory limit accepted: gVisor's Sentry, the agent and a
	// Python interpreter need about 40 MiB before any user code runs.
	MinMemoryMiB = 64
	// DefaultPIDs is the process/thread limit of a sandbox that names none.
	DefaultPIDs = 4096
	// MinPIDs is the smallest process/thread limit accepted: the agent's own threads count.
	MinPIDs = 32
	// MaxPIDs is the largest: Linux's PID_MAX_LIMIT.
	MaxPIDs = 1 << 22
	// MinCPUs is the smallest CPU quota accepted (the kernel's minimum quota is 1 ms per
	// 100 ms period).
	MinCPUs = 0.01
)

// Limits are a sandbox's resource limits, in force from its creation and in every copy made
// from its checkpoints (fork children and rollbacks get the limits the checkpoint's sandbox
// had). Zero values in a record written before limits existed mean "none".
type Limits struct {
	// MemoryMiB bounds the memory of the whole sandbox in MiB: its processes, the files
	// written to its in-memory root (/tmp and every other path), and gVisor's own kernel.
	MemoryMiB int
	// PIDs bounds the processes and threads alive at once inside the sandbox, the agent's
	// own threads included: past it, fork and clone fail with EAGAIN.
	PIDs int
	// CPUs is a CPU quota in cores (1.5 = one and a half cores of time per period); 0 means
	// no quota.
	CPUs float64
}

// Limits returns the limits o asks for (zero fields as given: see WithDefaults).
func (o CreateOptions) Limits() Limits {
	return Limits{MemoryMiB: o.MemoryMiB, PIDs: o.PIDs, CPUs: o.CPUs}
}

// IsZero reports whether l sets no limit at all (a record written before limits existed).
func (l Limits) IsZero() bool { return l == Limits{} }

// WithDefaults returns o with the default limits filled in where o names none: memory
// DefaultMemoryMiB (at most the host's memory), pids DefaultPIDs; CPUs stays 0 (no quota).
func (o CreateOptions) WithDefaults() CreateOptions {
	if o.MemoryMiB == 0 {
		o.MemoryMiB = DefaultMemoryMiB
		if host := hostMemoryMiB(); host > 0 && host < o.MemoryMiB {
			o.MemoryMiB = max(host, MinMemoryMiB)
		}
	}
	if o.PIDs == 0 {
		o.PIDs = DefaultPIDs
	}
	return o
}

// ValidateLimits checks the limits of o, where 0 means "the default": memory from
// MinMemoryMiB up to the host's memory, pids from MinPIDs to MaxPIDs, cpus from MinCPUs up
// to the host's CPU count. It returns an error wrapping errdefs.ErrInvalidArgument that
// names the field, the value and the bounds.
func ValidateLimits(o CreateOptions) error {
	if o.MemoryMiB != 0 {
		hi := hostMemoryMiB()
		if o.MemoryMiB < MinMemoryMiB || (hi > 0 && o.MemoryMiB > hi) {
			return fmt.Errorf("%w: memory_mib %d: must be from %d MiB to this host's memory (%d MiB)",
				errdefs.ErrInvalidArgument, o.MemoryMiB, MinMemoryMiB, hi)
		}
	}
	if o.PIDs != 0 && (o.PIDs < MinPIDs || o.PIDs > MaxPIDs) {
		return fmt.Errorf("%w: pids %d: must be from %d to %d", errdefs.ErrInvalidArgument, o.PIDs, MinPIDs, MaxPIDs)
	}
	if o.CPUs != 0 {
		n := runtime.NumCPU()
		if math.IsNaN(o.CPUs) || o.CPUs < MinCPUs || o.CPUs > float64(n) {
			return fmt.Errorf("%w: cpus %g: must be from %g to this host's %d CPUs (or 0: no quota)",
				errdefs.ErrInvalidArgument, o.CPUs, MinCPUs, n)
		}
	}
	return nil
}

// hostMemoryMiB returns MemTotal of /proc/meminfo in MiB, or 0 when it cannot be read.
func hostMemoryMiB() int {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kib, err := strconv.Atoi(fields[1])
			if err != nil {
				return 0
			}
			return kib >> 10
		}
	}
	return 0
}
