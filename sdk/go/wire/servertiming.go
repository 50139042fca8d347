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
	var b strings.Builder
	for i, s := range steps {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s.Name)
		b.WriteString(";dur=")
		b.WriteString(strconv.FormatFloat(float64(s.Dur.Microseconds())/1000, 'f', 3, 64))
	}
	return b.String()
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
