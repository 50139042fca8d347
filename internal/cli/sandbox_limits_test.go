package cli

import "testing"

func TestParseMiB(t *testing.T) {
	for in, want := range map[string]int{"": 0, "2048": 2048, "512m": 512, "512MiB": 512, "2g": 2048, "2G": 2048,
		"1.5g": 1536, "1gib": 1024, "64MB": 64} {
		if got, err := parseMiB(in); err != nil || got != want {
			t.Errorf("parseMiB(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"2x", "g", "-5", "0", "1e20g", "abc"} {
		if got, err := parseMiB(in); err == nil {
			t.Errorf("parseMiB(%q) = %d, want an error", in, got)
		}
	}
}
