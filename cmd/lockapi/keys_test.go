package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/lockapi/lockapi/internal/auth"
)

func TestKeysNew(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"keys", "new", "--principal", "ci", "--scopes", "locks:read,locks:write", "--patterns", "ci:*,deploy:*"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var key, line string
	for _, l := range strings.Split(out.String(), "\n") {
		if v, ok := strings.CutPrefix(l, "key:  "); ok {
			key = v
		}
		if v, ok := strings.CutPrefix(l, "line: "); ok {
			line = v
		}
	}
	if key == "" || line == "" || strings.Contains(line, key) {
		t.Fatalf("output:\n%s", out.String())
	}
	ring, err := auth.ParseKeys(line)
	if err != nil {
		t.Fatal(err)
	}
	k, ok := ring.Authenticate(key)
	if !ok || k.Principal != "ci" || !k.MayUse("deploy:prod") || k.Has(auth.ScopeAdmin) {
		t.Fatalf("the printed line does not configure the printed key: %+v", k)
	}

	for _, bad := range [][]string{
		{"keys"},
		{"keys", "new"},
		{"keys", "new", "--principal", "ci", "--scopes", "root"},
		{"keys", "new", "--principal", "ci", "--patterns", "a b"},
	} {
		if code := run(context.Background(), bad, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}
