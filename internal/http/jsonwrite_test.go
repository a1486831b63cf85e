package http

import (
	"bytes"
	"testing"
)

// appendStrings are answers in and out of appendPlain's plain strings.
var appendStrings = []string{"", "deploy:prod", "a b<&>", "é", "a\"b", "back\\slash", "tab\t", "\u2028", "\x7f", "\xff"}

// FuzzAppendJSON holds the answers that write their own JSON to the bytes
// encodeJSON writes of them, wherever they say they can.
func FuzzAppendJSON(f *testing.F) {
	for _, s := range appendStrings {
		f.Add(s, s, uint64(7), int64(30000), true)
	}
	f.Fuzz(func(t *testing.T, s, k string, token uint64, n int64, flag bool) {
		leases := []Lease{
			{Lock: s, LeaseID: "01JD3Z8Q6W9M4T5R2K7X1B0C8N", Owner: s, Mode: "exclusive", FencingToken: token, HoldCount: int(n), TTLMs: n,
				AcquiredAt: "2026-11-27T00:00:00.000Z", ExpiresAt: "2026-11-27T00:00:30.000Z", Metadata: map[string]string{}, ReleaseURL: "/v1/locks/x/leases/y/release?exp=1&sig=a-_"},
			{Lock: "l", Mode: "shared", Limit: int(n), Metadata: map[string]string{k: s, "z": "1", "a": k}, Session: s},
			{Metadata: nil},
		}
		for _, l := range leases {
			check(t, l)
		}
		check(t, ReleaseResult{Lock: s, LeaseID: k, HoldCount: int(n), Released: flag})
	})
}

func check(t *testing.T, v jsonAppender) {
	t.Helper()
	var want bytes.Buffer
	if err := encodeJSON(&want, v); err != nil {
		t.Fatal(err)
	}
	got, ok := v.appendJSON(nil)
	if ok && !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("appendJSON wrote\n%s\nencodeJSON\n%s", got, want.Bytes())
	}
	var w bytes.Buffer
	if err := writeAppended(&w, v, v); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.Bytes(), want.Bytes()) {
		t.Fatalf("writeAppended wrote\n%s\nencodeJSON\n%s", w.Bytes(), want.Bytes())
	}
}

// TestAppendJSON_plain checks that an everyday lease takes the fast path.
func TestAppendJSON_plain(t *testing.T) {
	l := Lease{Lock: "deploy:prod", LeaseID: "01JD3Z8Q6W9M4T5R2K7X1B0C8N", Owner: "worker-1", Mode: "exclusive",
		Metadata: map[string]string{"job": "nightly"}, ReleaseURL: "/v1/locks/deploy:prod/leases/01JD3Z8Q6W9M4T5R2K7X1B0C8N/release?exp=1&sig=x"}
	if _, ok := l.appendJSON(nil); !ok {
		t.Error("an everyday lease is not written by appendJSON")
	}
	check(t, l)
}
