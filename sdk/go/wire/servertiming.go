package wire

import (
	"strconv"
	"strings"
	"time"
)

// Timing is one step of a request as the daemon timed it (ServerTimingHeader).
type Timing struct {
	Name string        // a token: dir, fork+hello, before_go, run, collect
	Dur  time.Duration // how long it took
}

// FormatServerTiming renders steps as a Server-Timing value, durations in
// milliseconds with microsecond precision: "dir;dur=0.041, run;dur=1.200".
func FormatServerTiming(steps []Timing) string {
	var b []byte
	for _, s := range steps {
		b = AppendServerTiming(b, s.Name, s.Dur)
	}
	return string(b)
}

// AppendServerTiming appends the metric name;dur=MS to the Server-Timing
// value b (after ", " when b is not empty), as FormatServerTiming writes
// each step, and returns the extended value.
func AppendServerTiming(b []byte, name string, d time.Duration) []byte {
	if len(b) > 0 {
		b = append(b, ", "...)
	}
	b = append(append(b, name...), ";dur="...)
	return strconv.AppendFloat(b, float64(d.Microseconds())/1000, 'f', 3, 64)
}

// ParseServerTiming reads a Server-Timing value into its steps, in order.
// A metric without a readable dur is kept with Dur 0; parameters other
// than dur are ignored.
func ParseServerTiming(v string) []Timing {
	var out []Timing
	for _, metric := range strings.Split(v, ",") {
		parts := strings.Split(metric, ";")
		name := strings.TrimSpace(parts[0])
		if name == "" {
			continue
		}
		t := Timing{Name: name}
		for _, p := range parts[1:] {
			k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.TrimSpace(k) == "dur" {
				if ms, err := strconv.ParseFloat(strings.Trim(strings.TrimSpace(val), `"`), 64); err == nil {
					t.Dur = time.Duration(ms * float64(time.Millisecond))
				}
			}
		}
		out = append(out, t)
	}
	return out
}
