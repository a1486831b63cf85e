package http

import (
	"bytes"
	"reflect"
	"testing"
	"unicode/utf8"
)

// flatSeeds are bodies in and just outside decodeFlat's plain shape.
var flatSeeds = []string{
	`{}`,
	`{"owner":"worker-1","ttl_ms":30000}`,
	` { "owner" : "w" , "ttl_ms" : 1 , "wait_ms" : 0 } `,
	`{"owner":"w","metadata":{"a":"b","c":""},"mode":"shared","limit":3,"fair":true,"session":"s","min_replicas":0}`,
	`{"metadata":{}}`,
	`{"fair":false,"wait_ms":-0}`,
	`{"ttl_ms":9223372036854775807}`,
	`{"ttl_ms":9223372036854775808}`,
	`{"ttl_ms":-9223372036854775808}`,
	`{"ttl_ms":01}`,
	`{"ttl_ms":1.0}`,
	`{"ttl_ms":1e3}`,
	`{"ttl_ms":"1"}`,
	`{"ttl_ms":null}`,
	`{"owner":"a\"b"}`,
	`{"owner":"a\u0041"}`,
	`{"owner":"é"}`,
	`{"owner":"a","owner":"b"}`,
	`{"Owner":"a"}`,
	`{"owner":"a"} {}`,
	`{"owner":"a",}`,
	`{"metadata":{"a":"b","a":"c"}}`,
	`{"metadata":{"a":1}}`,
	`{"metadata":{"a":null}}`,
	`{"metadata":null}`,
	`{"fair":tru}`,
	`{"fair":truex}`,
	`{"unknown":1}`,
	"{\"owner\":\"a\tb\"}",
	`{"owner":"w","ttl_ms":30000`,
}

// FuzzDecodeFlat holds decodeFlat to the strict path: whatever it decodes,
// decodeStrict decodes without error to the same value, so that taking the
// fast path changes no answer.
func FuzzDecodeFlat(f *testing.F) {
	for _, s := range flatSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		// What decodeBody hands on: trimmed, a '{' first, valid UTF-8.
		data := bytes.TrimSpace(body)
		if len(data) == 0 || data[0] != '{' || !utf8.Valid(data) {
			return
		}
		for _, pair := range [][2]any{{new(acquireBody), new(acquireBody)}, {new(renewBody), new(renewBody)}} {
			fast, strict := pair[0], pair[1]
			if !decodeFlat(data, fast) {
				if !reflect.ValueOf(fast).Elem().IsZero() {
					t.Fatalf("%q: decodeFlat refused it but changed %T", data, fast)
				}
				continue
			}
			if err := decodeStrict(data, strict); err != nil {
				t.Fatalf("%q: decodeFlat took it, the strict path refuses it: %v", data, err)
			}
			if !reflect.DeepEqual(fast, strict) {
				t.Fatalf("%q: decodeFlat gives %+v, the strict path %+v", data, fast, strict)
			}
		}
	})
}

// TestDecodeFlat_takes_the_everyday_bodies checks that the bodies clients
// send take the fast path at all.
func TestDecodeFlat_takes_the_everyday_bodies(t *testing.T) {
	for _, body := range []string{
		`{"owner":"worker-1","ttl_ms":30000}`,
		`{"owner":"w","ttl_ms":1000,"wait_ms":5000,"metadata":{"job":"nightly"}}`,
		`{"mode":"shared","limit":4,"fair":true}`,
	} {
		if !decodeFlat([]byte(body), new(acquireBody)) {
			t.Errorf("acquire %s: not taken", body)
		}
	}
	if !decodeFlat([]byte(`{"ttl_ms":30000}`), new(renewBody)) {
		t.Error("renew: not taken")
	}
}
