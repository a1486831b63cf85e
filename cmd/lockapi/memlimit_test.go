package main

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestParseByteSize(t *testing.T) {
	for text, want := range map[string]int64{
		"512MiB": 512 << 20, "2GiB": 2 << 30, "64KiB": 64 << 10, "1TiB": 1 << 40,
		"1000000000": 1000000000, "4096B": 4096,
	} {
		if n, ok := parseByteSize(text); !ok || n != want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d", text, n, ok, want)
		}
	}
	for _, text := range []string{"", "512MB", "-1MiB", "0", "MiB", "1.5GiB", "9999999TiB"} {
		if n, ok := parseByteSize(text); ok {
			t.Errorf("parseByteSize(%q) = %d, want refused", text, n)
		}
	}
}

// LOCKAPI_MEMORY_LIMIT sets Go's soft memory limit.
func TestServe_MemoryLimit(t *testing.T) {
	clearEnvironment(t)
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("LOCKAPI_MEMORY_LIMIT", "512MiB")
	serveOnce(t, "serve", "--addr", "127.0.0.1:0")
	if got := debug.SetMemoryLimit(-1); got != 512<<20 {
		t.Fatalf("memory limit = %d, want %d", got, 512<<20)
	}
}
