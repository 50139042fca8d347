package cli

import (
	"fmt"
	"strconv"
	"strings"
)

// limitsHelp is the part of `sandbox create --help` about resource limits.
const limitsHelp = "--memory MIB (or 512m, 2g) bounds the sandbox's memory: its processes and the files written\n" +
	"to its in-memory root (/tmp and every other path) together; default 2048 MiB. Past it the kernel\n" +
	"kills the largest process inside, or the whole sandbox (then dead, with the cause).\n" +
	"--pids N bounds processes and threads alive at once inside (default 4096): fork fails with EAGAIN.\n" +
	"--cpus N is a CPU quota in cores (1.5 = one and a half; default none).\n" +
	"Every fork child and rollback gets the limits of the sandbox its checkpoint was taken of."

// parseMiB parses a --memory value: a number of MiB, or a number with the unit m/mb/mib or
// g/gb/gib (case-insensitive). "" is 0 (the default).
func parseMiB(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	s := strings.ToLower(strings.TrimSpace(v))
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"gib", 1024}, {"gb", 1024}, {"g", 1024}, {"mib", 1}, {"mb", 1}, {"m", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n <= 0 || n*float64(mult) > 1<<40 {
		return 0, fmt.Errorf("%q is not a size in MiB (e.g. 2048, 512m, 2g)", v)
	}
	return int(n * float64(mult)), nil
}
