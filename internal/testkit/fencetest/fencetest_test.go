package fencetest_test

import (
	"errors"
	"testing"

	"github.com/lockapi/lockapi/fence"
	"github.com/lockapi/lockapi/internal/testkit/fencetest"
)

func TestResource(t *testing.T) {
	var r fencetest.Resource
	for _, w := range []fencetest.Write{{Token: 7, Value: "a"}, {Token: 7, Value: "b"}, {Token: 9, Value: "c"}} {
		if err := r.Write(w.Token, w.Value); err != nil {
			t.Fatalf("write %+v: %v", w, err)
		}
	}
	if err := r.Write(8, "late"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("write with a lower token: %v, want fence.ErrStale", err)
	}
	if got := r.Writes(); len(got) != 3 || got[2] != (fencetest.Write{Token: 9, Value: "c"}) {
		t.Fatalf("writes = %+v", got)
	}
}
