package function

import (
	"fmt"
	"strings"
)

// limitWarnings returns what a deploy of man tells its caller about limits this Manager
// cannot enforce: without a Limiter (the daemon is not root, or the host has no usable cgroup
// hierarchy) memory_mib, pids, cpu_ms, zygote_memory_mib and zygote_pids are not applied. One
// sentence naming each key that has a value (pids and cpu_ms only when set), or nil. The
// daemon logs the same once at start; this carries it to whoever deploys (DeployResult.Warnings).
func (m *Manager) limitWarnings(man *Manifest) []string {
	if m.limiter != nil {
		return nil
	}
	l := man.Limits
	keys := []string{fmt.Sprintf("limits.memory_mib (%d)", l.MemoryMiB)}
	if l.PIDs > 0 {
		keys = append(keys, fmt.Sprintf("limits.pids (%d)", l.PIDs))
	}
	if l.CPUMs > 0 {
		keys = append(keys, fmt.Sprintf("limits.cpu_ms (%d)", l.CPUMs))
	}
	keys = append(keys, fmt.Sprintf("limits.zygote_memory_mib (%d)", l.ZygoteMemoryMiB), fmt.Sprintf("limits.zygote_pids (%d)", l.ZygotePIDs))
	return []string{strings.Join(keys, ", ") + " are not enforced: this daemon cannot manage cgroups " +
		"(it is not root, or the host has no usable cgroup hierarchy; its log at start says which)"}
}
