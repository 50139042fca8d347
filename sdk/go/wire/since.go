package wire

import (
	"errors"
	"time"
)

// ParseSince reads the since of the logs route (and of `zygo logs --since`): an RFC 3339
// time ("2026-01-02T15:04:05Z", fractions of a second allowed), or a positive duration in Go
// syntax ("10m", "1h30m", "90s") counted back from now. Its error says what is expected.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, errors.New("must be an RFC 3339 time such as 2026-01-02T15:04:05Z or a positive duration such as 10m")
}
