package redis

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/lockapi/lockapi/internal/fencetoken"
)

// TestScripts_token_rule_pinned: the acquire scripts apply the fencing
// token rule in Lua (the Go reference is package fencetoken), with the bound
// written as a literal, since Lua cannot read a Go constant. Every bound a
// script checks a token against must be fencetoken.MaxToken, and both scripts
// that issue tokens must check one.
func TestScripts_token_rule_pinned(t *testing.T) {
	bound := regexp.MustCompile(`token > (\d+)`)
	for name, src := range map[string]string{"acquire.lua": acquireLua, "acquire_fast.lua": acquireFastLua} {
		found := bound.FindAllStringSubmatch(src, -1)
		if len(found) == 0 {
			t.Errorf("%s checks no token against a bound (want %d)", name, uint64(fencetoken.MaxToken))
		}
		for _, m := range found {
			if v, err := strconv.ParseUint(m[1], 10, 64); err != nil || v != fencetoken.MaxToken {
				t.Errorf("%s bounds tokens by %s, want fencetoken.MaxToken = %d", name, m[1], uint64(fencetoken.MaxToken))
			}
		}
	}
}
