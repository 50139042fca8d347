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

// ReadCPU reads pid's CPU times.
func ReadCPU(pid int) (CPUTimes, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return CPUTimes{}, err
	}
	s := string(b)
	// Fields after the command (which may hold spaces) start at state (3).
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return CPUTimes{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	tick := func(i int) time.Duration { // i is the field number of proc(5)
		n, _ := strconv.ParseInt(f[i-3], 10, 64)
		return time.Duration(n) * clockTick
	}
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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Counts{}, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 9 {
		return Counts{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	minflt, _ := strconv.ParseInt(f[10-3], 10, 64)
	cminflt, _ := strconv.ParseInt(f[11-3], 10, 64)
	c := Counts{Faults: minflt + cminflt}
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
