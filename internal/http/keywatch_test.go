package http_test

import (
	"testing"

	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
)

// An anonymous stream on an open server goes on while a reload keeps the
// server open, and ends once a reload configures keys: its caller would no
// longer be let in.
func TestEvents_AnonymousEndsWhenKeysConfigured(t *testing.T) {
	keys, err := auth.ParseKeys("")
	if err != nil {
		t.Fatal(err)
	}
	e := MustOpenEnv(t, lockhttp.Config{Keys: keys})
	s := e.OpenEvents("")

	still, err := auth.ParseKeys("# still open")
	if err != nil {
		t.Fatal(err)
	}
	keys.Replace(still)
	e.Acquire("a", "")
	s.Event() // the stream outlived a reload that left the server open

	_, line, err := auth.NewKey("ops", []auth.Scope{auth.ScopeAdmin}, []string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	keyed, err := auth.ParseKeys(line)
	if err != nil {
		t.Fatal(err)
	}
	keys.Replace(keyed)
	s.Ended()
}
