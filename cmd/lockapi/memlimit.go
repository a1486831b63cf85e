package main

import (
	"math"
	"runtime/debug"
	"strconv"
	"strings"
)

// The memory limit is Go's soft memory limit (debug.SetMemoryLimit), which
// GOMEMLIMIT sets as Go documents it; --memory-limit, when given, sets it
// instead. Under the limit the collector runs as GOGC says; near it, more
// often, and it returns freed memory to the OS. That is what a burst of
// parked waiters needs (their requests' garbage goes back at once, rather
// than at Go's two-minute forced collection), with no tuning of our own.

// memoryLimitValue is a byte size as GOMEMLIMIT spells one (512MiB,
// 2GiB, 1000000000), or "" to leave the runtime's limit (GOMEMLIMIT's).
func memoryLimitValue(p *int64) value {
	*p = -1
	return value{arg: "BYTES", set: func(s string) error {
		n, ok := parseByteSize(s)
		if !ok {
			return wantf("a size in bytes as GOMEMLIMIT takes one, such as 512MiB or 2GiB")
		}
		*p = n
		return nil
	}}
}

// parseByteSize reads a byte size as the runtime reads GOMEMLIMIT: a
// number with an optional unit of B, KiB, MiB, GiB or TiB.
func parseByteSize(s string) (int64, bool) {
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	shift := uint(0)
	for _, u := range units {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, shift = rest, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64>>shift {
		return 0, false
	}
	return n << shift, true
}

// applyMemoryLimit sets the soft memory limit to limit bytes, unless it is
// -1 (not given: GOMEMLIMIT, or none, as Go documents), and returns the
// limit in effect.
func applyMemoryLimit(limit int64) int64 {
	if limit >= 0 {
		debug.SetMemoryLimit(limit)
	}
	return debug.SetMemoryLimit(-1)
}
