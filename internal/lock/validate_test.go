package lock_test

import (
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/lockapi/lockapi"
	"github.com/lockapi/lockapi/internal/lock"
)

// The references the validators must agree with are the contract's own
// schemas in openapi.yaml, so that the spec says all the server enforces.
var (
	spec = func() *openapi3.T {
		doc, err := openapi3.NewLoader().LoadFromData(lockapi.OpenAPI)
		if err != nil {
			panic(err)
		}
		return doc
	}()
	nameRef   = spec.Components.Schemas["LockName"].Value
	ownerRef  = spec.Components.Schemas["Owner"].Value
	prefixRef = spec.Components.Parameters["Prefix"].Value.Schema.Value
)

// conforms reports whether the string s is valid by schema.
func conforms(schema *openapi3.Schema, s string) bool { return schema.VisitJSON(s) == nil }

func FuzzValidName(f *testing.F) {
	for _, s := range []string{
		"deploy:prod", "a", "", "A-Z.a_z:0@9~", strings.Repeat("x", 200), strings.Repeat("x", 201),
		"has space", "slash/", "brace{x}", "star*", "tab\t", "new\n", "name\n", "é", "\xff", "x\x00",
		".", "..", "...", strings.Repeat(".", 200), ".a", "a.", "..a..",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, want := lock.ValidName(name), conforms(nameRef, name)
		if got != want {
			t.Fatalf("ValidName(%q) = %v, reference says %v", name, got, want)
		}
		if fe := lock.CheckName("name", name); (fe == nil) != got || (fe != nil && fe.Field != "name") {
			t.Fatalf("CheckName(%q) = %+v, but ValidName = %v", name, fe, got)
		}
		if fe, want := lock.CheckPrefix("prefix", name), conforms(prefixRef, name); (fe == nil) != want || (fe != nil && fe.Field != "prefix") {
			t.Fatalf("CheckPrefix(%q) = %+v, reference says valid=%v", name, fe, want)
		}
	})
}

func FuzzCheckOwner(f *testing.F) {
	for _, s := range []string{
		"ci-runner-1", "", " ", "worker 7", "日本語", "emoji 🔒", strings.Repeat("é", 128), strings.Repeat("é", 129),
		"tab\t", "nul\x00", "\xff", "\u200b", "\u00a0", "\ufffd", "a\u0301", "\U000E0001", "\u2028",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, owner string) {
		fe := lock.CheckOwner("owner", owner)
		if fe == nil {
			n := utf8.RuneCountInString(owner)
			if !utf8.ValidString(owner) || n < 1 || n > lock.MaxOwnerLen {
				t.Fatalf("CheckOwner accepted %q: %d runes, valid UTF-8 %v", owner, n, utf8.ValidString(owner))
			}
			for _, r := range owner {
				if !unicode.IsPrint(r) {
					t.Fatalf("CheckOwner accepted %q with the unprintable %U", owner, r)
				}
			}
		} else if fe.Field != "owner" {
			t.Fatalf("CheckOwner(%q) names field %q", owner, fe.Field)
		}
		if want := conforms(ownerRef, owner); (fe == nil) != want {
			t.Fatalf("CheckOwner(%q) = %+v, reference says valid=%v", owner, fe, want)
		}

		// Validate reports the owner if and only if CheckOwner does.
		err := lock.AcquireRequest{Lock: "x", Owner: owner, TTL: time.Second}.Validate()
		if (err == nil) != (fe == nil) {
			t.Fatalf("Validate with owner %q: %v, but CheckOwner: %+v", owner, err, fe)
		}
		if err != nil && (lock.ErrorCode(err) != lock.CodeInvalid || lock.AsError(err).Fields[0].Field != "owner") {
			t.Fatalf("Validate with owner %q: %+v", owner, lock.AsError(err))
		}
	})
}

// metadataOf decodes a fuzz input into metadata: entries are separated by
// NUL, and an entry's key from its value by \x01.
func metadataOf(data []byte) map[string]string {
	if len(data) == 0 {
		return nil
	}
	md := map[string]string{}
	for _, entry := range strings.Split(string(data), "\x00") {
		k, v, _ := strings.Cut(entry, "\x01")
		md[k] = v
	}
	return md
}

func FuzzCheckMetadata(f *testing.F) {
	entries := func(n int) []byte {
		var parts []string
		for i := range n {
			parts = append(parts, string(rune('a'+i))+"\x01v")
		}
		return []byte(strings.Join(parts, "\x00"))
	}
	for _, b := range [][]byte{
		nil, []byte("commit\x014f2a9c1"), []byte("\x01empty key"), []byte("k\x01\xff"), []byte("\xfe\x01v"),
		entries(16), entries(17),
		[]byte("k\x01" + strings.Repeat("v", 4095)), []byte("k\x01" + strings.Repeat("v", 4094)),
		[]byte("k\x01v\x00k\x01w"), []byte("日本\x01語"),
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		md := metadataOf(data)
		fe := lock.CheckMetadata("metadata", md)

		want, size := len(md) <= lock.MaxMetadataKeys, 0
		for k, v := range md {
			want = want && k != "" && utf8.ValidString(k) && utf8.ValidString(v)
			size += len(k) + len(v)
		}
		want = want && size <= lock.MaxMetadataBytes
		if (fe == nil) != want {
			t.Fatalf("CheckMetadata(%q) = %+v, reference says valid=%v (%d keys, %d bytes)", md, fe, want, len(md), size)
		}
		if fe != nil && fe.Field != "metadata" {
			t.Fatalf("CheckMetadata(%q) names field %q", md, fe.Field)
		}
		err := lock.AcquireRequest{Lock: "x", Owner: "o", TTL: time.Second, Metadata: md}.Validate()
		if (err == nil) != (fe == nil) {
			t.Fatalf("Validate with metadata %q: %v, but CheckMetadata: %+v", md, err, fe)
		}
	})
}

// Validate is the one check of a request: a mode and limit that make no
// lock kind are refused there, for the stores trust what they are given.
func TestValidate_kinds(t *testing.T) {
	for _, c := range []struct {
		name  string
		req   lock.AcquireRequest
		field string // "" for valid
	}{
		{"LimitTooLarge", lock.AcquireRequest{Limit: lock.MaxLimit + 1}, "limit"},
		{"LimitNegative", lock.AcquireRequest{Limit: -1}, "limit"},
		{"SharedPermits", lock.AcquireRequest{Limit: 2, Mode: lock.Shared}, "limit"},
		{"UnknownMode", lock.AcquireRequest{Mode: "upgrade"}, "mode"},
		{"NoLimit", lock.AcquireRequest{Mode: lock.Exclusive}, ""},
		{"LargestSemaphore", lock.AcquireRequest{Limit: lock.MaxLimit}, ""},
		{"SharedLock", lock.AcquireRequest{Mode: lock.Shared}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := c.req
			req.Lock, req.Owner, req.TTL = "v", "x", time.Minute
			err := req.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatalf("Validate(%+v) = %v, want nil", req, err)
				}
				return
			}
			if lock.ErrorCode(err) != lock.CodeInvalid {
				t.Fatalf("Validate(%+v) = %v, want %s", req, err, lock.CodeInvalid)
			}
			fields := lock.AsError(err).Fields
			if len(fields) != 1 || fields[0].Field != c.field {
				t.Fatalf("fields %+v, want one of %q", fields, c.field)
			}
		})
	}
}
