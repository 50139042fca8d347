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
