package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/PID/stat's times (100 on every
// Linux architecture Go supports).
const clockTick = 10 * time.Millisecond

// CPUTimes is a process's CPU time from /proc/PID/stat (proc(5)): its own
// (utime+stime) and that of its children it has waited for
// (cutime+cstime).
type CPUTimes struct {
	Self, Children time.Duration
}

// Total is Self + Children.
func (c CPUTimes) Total() time.Duration { return c.Self + c.Children }

// Sub is c - o, field by field.
func (c CPUTimes) Sub(o CPUTimes) CPUTimes {
	return CPUTimes{Self: c.Self - o.Self, Children: c.Children - o.Children}
}

// statFields reads /proc/PID/stat and returns its numeric fields 3 to last (proc(5)'s
// numbering) as field(i), for i of 3 up to want; an error if the file is unreadable or
// shorter. The command (field 2, which may hold spaces and parentheses) is skipped by
// cutting at its last ')'. A field that does not parse reads as 0.
func statFields(pid, want int) (field func(i int) int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < want-2 {
		return nil, fmt.Errorf("short /proc/%d/stat", pid)
	}
	return func(i int) int64 {
		n, _ := strconv.ParseInt(f[i-3], 10, 64)
		return n
	}, nil
}

// ReadCPU reads pid's CPU times (/proc/PID/stat fields 14 to 17: utime, stime, cutime,
// cstime, in clock ticks).
func ReadCPU(pid int) (CPUTimes, error) {
	field, err := statFields(pid, 17)
	if err != nil {
		return CPUTimes{}, err
	}
	tick := func(i int) time.Duration { return time.Duration(field(i)) * clockTick }
	return CPUTimes{Self: tick(14) + tick(15), Children: tick(16) + tick(17)}, nil
}

// Counts are what a process did, counted by the kernel: Faults, the minor
// page faults of the process and of the children it has waited for
// (/proc/PID/stat fields 10 and 11, minflt and cminflt), and Switches, the
// context switches of its threads alive now (voluntary and not, summed over
// /proc/PID/task/*/status). Counts per request do not move with the host's
// load as CPU times do.
type Counts struct {
	Faults, Switches int64
}

// Sub is c - o, field by field.
func (c Counts) Sub(o Counts) Counts {
	return Counts{Faults: c.Faults - o.Faults, Switches: c.Switches - o.Switches}
}

// ReadCounts reads pid's Counts.
func ReadCounts(pid int) (Counts, error) {
	field, err := statFields(pid, 11)
	if err != nil {
		return Counts{}, err
	}
	c := Counts{Faults: field(10) + field(11)}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return Counts{}, err
	}
	for _, task := range tasks {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		if err != nil {
			continue // the thread exited meanwhile
		}
		for _, line := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				c.Switches += n
			} else if v, ok := strings.CutPrefix(line, "nonvoluntary_ctxt_switches:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				c.Switches += n
			}
		}
	}
	return c, nil
}
