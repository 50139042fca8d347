package wire

import (
	"reflect"
	"testing"
	"time"
)

func TestServerTimingRoundTrip(t *testing.T) {
	steps := []Timing{{"dir", 41 * time.Microsecond}, {"fork+hello", 12 * time.Microsecond}, {"run", 1200 * time.Microsecond}}
	v := FormatServerTiming(steps)
	if v != "dir;dur=0.041, fork+hello;dur=0.012, run;dur=1.200" {
		t.Fatalf("formatted %q", v)
	}
	if got := ParseServerTiming(v); !reflect.DeepEqual(got, steps) {
		t.Fatalf("parsed %v, want %v", got, steps)
	}
	if got := ParseServerTiming(`cache;desc="x", db;dur=2`); !reflect.DeepEqual(got, []Timing{{"cache", 0}, {"db", 2 * time.Millisecond}}) {
		t.Fatalf("parsed %v", got)
	}
}
