package http_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
)

// TestMalformed sends requests that must all be refused with a 4xx problem
// and must leave the store exactly as it was. "busy" is held by the lease
// {L}, so a malformed release or renew that slipped through would show.
func TestMalformed(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	busy := e.Acquire("busy", `{"owner":"a","ttl_ms":3600000}`)

	var keys []string
	for i := range lock.MaxMetadataKeys + 1 {
		keys = append(keys, fmt.Sprintf(`"k%d":"v"`, i))
	}
	metadata17 := `{"metadata":{` + strings.Join(keys, ",") + `}}`

	json := "application/json"
	for _, tc := range []struct {
		name         string
		method, path string
		body         string
		ct           string // Content-Type; json when empty and there is a body
		status       int
		slug         string
		field        string // the field errors[0] must name, if set
	}{
		// Bodies that are not one JSON object.
		{"TruncatedJSON400", "POST", "/v1/locks/fresh/leases", `{"owner":`, json, 400, "invalid-request", "body"},
		{"NotJSON400", "POST", "/v1/locks/fresh/leases", `owner=a`, json, 400, "invalid-request", "body"},
		{"TrailingObject400", "POST", "/v1/locks/fresh/leases", `{"owner":"a"} {"owner":"b"}`, json, 400, "invalid-request", "body"},
		{"TrailingGarbage400", "POST", "/v1/locks/fresh/leases", `{}x`, json, 400, "invalid-request", "body"},
		{"ArrayBody400", "POST", "/v1/locks/fresh/leases", `[]`, json, 400, "invalid-request", "body"},
		{"StringBody400", "POST", "/v1/locks/fresh/leases", `"owner"`, json, 400, "invalid-request", "body"},
		{"NullBody400", "POST", "/v1/locks/fresh/leases", `null`, json, 400, "invalid-request", "body"},
		{"RenewTruncated400", "POST", "/v1/locks/busy/leases/{L}/renew", `{"ttl_ms":`, json, 400, "invalid-request", "body"},

		// Unknown fields and wrong types.
		{"UnknownField400", "POST", "/v1/locks/fresh/leases", `{"ownr":"a"}`, json, 400, "invalid-request", "ownr"},
		{"FieldCaseMismatch400", "POST", "/v1/locks/fresh/leases", `{"TTL_MS":100}`, json, 400, "invalid-request", "TTL_MS"},
		{"RenewUnknownField400", "POST", "/v1/locks/busy/leases/{L}/renew", `{"ttl_ms":1000,"all":true}`, json, 400, "invalid-request", "all"},
		{"OwnerNumber400", "POST", "/v1/locks/fresh/leases", `{"owner":5}`, json, 400, "invalid-request", "owner"},
		{"TTLString400", "POST", "/v1/locks/fresh/leases", `{"ttl_ms":"100"}`, json, 400, "invalid-request", "ttl_ms"},
		{"TTLFraction400", "POST", "/v1/locks/fresh/leases", `{"ttl_ms":100.5}`, json, 400, "invalid-request", "ttl_ms"},
		{"TTLOverflowsInt64400", "POST", "/v1/locks/fresh/leases", `{"ttl_ms":99999999999999999999}`, json, 400, "invalid-request", "ttl_ms"},
		{"WaitHuge400", "POST", "/v1/locks/fresh/leases", `{"wait_ms":1e30}`, json, 400, "invalid-request", "wait_ms"},
		{"MetadataValueNumber400", "POST", "/v1/locks/fresh/leases", `{"metadata":{"a":1}}`, json, 400, "invalid-request", "metadata"},
		{"MetadataArray400", "POST", "/v1/locks/fresh/leases", `{"metadata":["a"]}`, json, 400, "invalid-request", "metadata"},
		{"FairString400", "POST", "/v1/locks/fresh/leases", `{"fair":"yes"}`, json, 400, "invalid-request", "fair"},
		{"FairNumber400", "POST", "/v1/locks/fresh/leases", `{"fair":1}`, json, 400, "invalid-request", "fair"},
		{"ModeNumber400", "POST", "/v1/locks/fresh/leases", `{"mode":1}`, json, 400, "invalid-request", "mode"},
		{"LimitString400", "POST", "/v1/locks/fresh/leases", `{"limit":"5"}`, json, 400, "invalid-request", "limit"},
		{"LimitFraction400", "POST", "/v1/locks/fresh/leases", `{"limit":2.5}`, json, 400, "invalid-request", "limit"},
		{"LimitOverflowsInt64400", "POST", "/v1/locks/fresh/leases", `{"limit":99999999999999999999}`, json, 400, "invalid-request", "limit"},
		{"ModeTwice400", "POST", "/v1/locks/fresh/leases", `{"mode":"shared","mode":"exclusive"}`, json, 400, "invalid-request", "mode"},
		{"ModeCaseMismatch400", "POST", "/v1/locks/fresh/leases", `{"Mode":"shared"}`, json, 400, "invalid-request", "Mode"},

		// null is no member's value: nothing in the schema is nullable.
		{"OwnerNull400", "POST", "/v1/locks/fresh/leases", `{"owner":null}`, json, 400, "invalid-request", "owner"},
		{"TTLNull400", "POST", "/v1/locks/fresh/leases", `{"owner":"a","ttl_ms":null}`, json, 400, "invalid-request", "ttl_ms"},
		{"FairNull400", "POST", "/v1/locks/fresh/leases", `{"fair":null}`, json, 400, "invalid-request", "fair"},
		{"MetadataNull400", "POST", "/v1/locks/fresh/leases", `{"metadata":null}`, json, 400, "invalid-request", "metadata"},
		{"MetadataValueNull400", "POST", "/v1/locks/fresh/leases", `{"metadata":{"k":null}}`, json, 400, "invalid-request", "metadata"},
		{"RenewTTLNull400", "POST", "/v1/locks/busy/leases/{L}/renew", `{"ttl_ms":null}`, json, 400, "invalid-request", "ttl_ms"},
		{"AcquireAllLockNull400", "POST", "/v1/leases", `{"locks":["fresh",null]}`, json, 400, "invalid-request", "locks"},
		{"AcquireAllOwnerNull400", "POST", "/v1/leases", `{"locks":["fresh"],"owner":null}`, json, 400, "invalid-request", "owner"},

		// Values out of range.
		{"TTLNegative400", "POST", "/v1/locks/fresh/leases", `{"ttl_ms":-1}`, json, 400, "invalid-request", "ttl_ms"},
		{"TTLBelowMin400", "POST", "/v1/locks/fresh/leases", `{"ttl_ms":9}`, json, 400, "invalid-request", "ttl_ms"},
		{"TTLAboveMax400", "POST", "/v1/locks/fresh/leases", `{"ttl_ms":86400001}`, json, 400, "invalid-request", "ttl_ms"},
		{"TTLMinInt64400", "POST", "/v1/locks/fresh/leases", `{"ttl_ms":-9223372036854775808}`, json, 400, "invalid-request", "ttl_ms"},
		{"WaitNegative400", "POST", "/v1/locks/fresh/leases", `{"wait_ms":-5}`, json, 400, "invalid-request", "wait_ms"},
		{"RenewTTLAboveMax400", "POST", "/v1/locks/busy/leases/{L}/renew", `{"ttl_ms":86400001}`, json, 400, "invalid-request", "ttl_ms"},
		{"RenewTTLZero400", "POST", "/v1/locks/busy/leases/{L}/renew", `{"ttl_ms":0}`, json, 400, "invalid-request", "ttl_ms"},
		{"OwnerEmpty400", "POST", "/v1/locks/fresh/leases", `{"owner":""}`, json, 400, "invalid-request", "owner"},
		{"OwnerTooLong400", "POST", "/v1/locks/fresh/leases", `{"owner":"` + strings.Repeat("o", 129) + `"}`, json, 400, "invalid-request", "owner"},
		{"OwnerControlChar400", "POST", "/v1/locks/fresh/leases", `{"owner":"a\u0007b"}`, json, 400, "invalid-request", "owner"},
		{"MetadataTooManyKeys400", "POST", "/v1/locks/fresh/leases", metadata17, json, 400, "invalid-request", "metadata"},
		{"MetadataEmptyKey400", "POST", "/v1/locks/fresh/leases", `{"metadata":{"":"v"}}`, json, 400, "invalid-request", "metadata"},
		{"MetadataTooBig400", "POST", "/v1/locks/fresh/leases", `{"metadata":{"k":"` + strings.Repeat("v", 5000) + `"}}`, json, 400, "invalid-request", "metadata"},
		{"ModeUpgrade400", "POST", "/v1/locks/fresh/leases", `{"mode":"upgrade"}`, json, 400, "invalid-request", "mode"},
		{"ModeUpperCase400", "POST", "/v1/locks/fresh/leases", `{"mode":"SHARED"}`, json, 400, "invalid-request", "mode"},
		{"ModeEmpty400", "POST", "/v1/locks/fresh/leases", `{"mode":""}`, json, 400, "invalid-request", "mode"},
		{"LimitZero400", "POST", "/v1/locks/fresh/leases", `{"limit":0}`, json, 400, "invalid-request", "limit"},
		{"LimitNegative400", "POST", "/v1/locks/fresh/leases", `{"limit":-1}`, json, 400, "invalid-request", "limit"},
		{"Limit10001_400", "POST", "/v1/locks/fresh/leases", `{"limit":10001}`, json, 400, "invalid-request", "limit"},
		{"LimitMaxInt64_400", "POST", "/v1/locks/fresh/leases", `{"limit":9223372036854775807}`, json, 400, "invalid-request", "limit"},
		{"LimitShared400", "POST", "/v1/locks/fresh/leases", `{"mode":"shared","limit":3}`, json, 400, "invalid-request", "limit"},
		{"LimitOnHeldLock400", "POST", "/v1/locks/busy/leases", `{"owner":"a","limit":0}`, json, 400, "invalid-request", "limit"},

		// Bad lock names.
		{"NameUnicode400", "POST", "/v1/locks/%C3%A9t%C3%A9/leases", "", "", 400, "invalid-request", "name"},
		{"NameNUL400", "GET", "/v1/locks/a%00b", "", "", 400, "invalid-request", "name"},
		{"NameControlChar400", "DELETE", "/v1/locks/a%07b", "", "", 400, "invalid-request", "name"},
		{"NameSpace400", "GET", "/v1/locks/a%20b", "", "", 400, "invalid-request", "name"},
		{"NameEncodedSlash400", "DELETE", "/v1/locks/busy%2Fx", "", "", 400, "invalid-request", "name"},
		{"NameStar400", "POST", "/v1/locks/bu*/leases", "", "", 400, "invalid-request", "name"},
		{"Name201Chars400", "POST", "/v1/locks/" + strings.Repeat("n", 201) + "/leases", "", "", 400, "invalid-request", "name"},
		{"ReleaseBadName400", "DELETE", "/v1/locks/b%C3%BCsy/leases/{L}", "", "", 400, "invalid-request", "name"},
		{"NameDots400", "GET", "/v1/locks/...", "", "", 400, "invalid-request", "name"},
		{"NameEncodedDots400", "POST", "/v1/locks/%2E%2E/leases", "", "", 400, "invalid-request", "name"},
		{"AcquireAllNameDot400", "POST", "/v1/leases", `{"locks":["fresh","."]}`, json, 400, "invalid-request", "locks"},
		{"SignedReleaseNoExp400", "POST", "/v1/locks/busy/leases/{L}/release?sig=abc", "", "", 400, "invalid-request", "exp"},
		{"SignedReleaseExpText400", "POST", "/v1/locks/busy/leases/{L}/release?exp=soon&sig=abc", "", "", 400, "invalid-request", "exp"},
		{"SignedReleaseNoSig400", "POST", "/v1/locks/busy/leases/{L}/release?exp=1", "", "", 400, "invalid-request", "sig"},
		{"SignedReleaseBadQuery400", "POST", "/v1/locks/busy/leases/{L}/release?exp=1&sig=abc&x=%zz", "", "", 400, "invalid-request", "query"},
		{"ReleaseAllNameDots400", "DELETE", "/v1/leases?id=../{L}", "", "", 400, "invalid-request", "id"},

		// Bad lease ids and query parameters.
		{"RenewLeaseIDNotULID400", "POST", "/v1/locks/busy/leases/not-a-ulid/renew", "", "", 400, "invalid-request", "lease_id"},
		{"ReleaseLeaseIDLowercase400", "DELETE", "/v1/locks/busy/leases/{l}", "", "", 400, "invalid-request", "lease_id"},
		{"ReleaseLeaseID27Chars400", "DELETE", "/v1/locks/busy/leases/{L}0", "", "", 400, "invalid-request", "lease_id"},
		{"ReleaseLeaseIDLetterU400", "DELETE", "/v1/locks/busy/leases/UUUUUUUUUUUUUUUUUUUUUUUUUU", "", "", 400, "invalid-request", "lease_id"},
		{"ReleaseAllYes400", "DELETE", "/v1/locks/busy/leases/{L}?all=yes", "", "", 400, "invalid-request", "all"},
		{"ReleaseAllEmpty400", "DELETE", "/v1/locks/busy/leases/{L}?all=", "", "", 400, "invalid-request", "all"},
		{"ReleaseAllTwice400", "DELETE", "/v1/locks/busy/leases/{L}?all=true&all=false", "", "", 400, "invalid-request", "all"},
		{"ReleaseBadQueryEscape400", "DELETE", "/v1/locks/busy/leases/{L}?all=%zz", "", "", 400, "invalid-request", "query"},
		{"ListLimitZero400", "GET", "/v1/locks?limit=0", "", "", 400, "invalid-request", "limit"},
		{"ListLimit1001_400", "GET", "/v1/locks?limit=1001", "", "", 400, "invalid-request", "limit"},
		{"ListLimitText400", "GET", "/v1/locks?limit=ten", "", "", 400, "invalid-request", "limit"},
		{"ListPrefixStar400", "GET", "/v1/locks?prefix=bu*", "", "", 400, "invalid-request", "prefix"},
		{"InspectWaitNegative400", "GET", "/v1/locks/busy?index=x&wait_ms=-1", "", "", 400, "invalid-request", "wait_ms"},
		{"InspectWaitText400", "GET", "/v1/locks/busy?index=x&wait_ms=soon", "", "", 400, "invalid-request", "wait_ms"},

		// Bad multi-releases: "busy" stays held by {L}.
		{"ReleaseAllNoID400", "DELETE", "/v1/leases", "", "", 400, "invalid-request", "id"},
		{"ReleaseAllEmptyID400", "DELETE", "/v1/leases?id=", "", "", 400, "invalid-request", "id"},
		{"ReleaseAllNoSlash400", "DELETE", "/v1/leases?id={L}", "", "", 400, "invalid-request", "id"},
		{"ReleaseAllBadLeaseID400", "DELETE", "/v1/leases?id=busy/{L}&id=busy/not-a-ulid", "", "", 400, "invalid-request", "id"},
		{"ReleaseAllBadName400", "DELETE", "/v1/leases?id=busy/{L}&id=b%20usy/{L}", "", "", 400, "invalid-request", "id"},
		{"ReleaseAllTwoSlashes400", "DELETE", "/v1/leases?id=busy/{L}/x", "", "", 400, "invalid-request", "id"},
		{"ReleaseAllDuplicate400", "DELETE", "/v1/leases?id=busy/{L}&id=busy/{L}", "", "", 400, "invalid-request", "id"},
		{"ReleaseAll65_400", "DELETE", "/v1/leases?" + strings.Repeat("id=busy/{L}&", 64) + "id=fresh/{L}", "", "", 400, "invalid-request", "id"},
		{"ReleaseAllBadQueryEscape400", "DELETE", "/v1/leases?id=busy/{L}&x=%zz", "", "", 400, "invalid-request", "query"},
		{"AcquireAllUnknownField400", "POST", "/v1/leases", `{"locks":["fresh"],"fair":false}`, json, 400, "invalid-request", "fair"},
		{"AcquireAllHeldAndDuplicate400", "POST", "/v1/leases", `{"locks":["fresh","busy","fresh"],"owner":"a"}`, json, 400, "invalid-request", "locks"},

		// Bodies the server will not read.
		{"OversizedBody413", "POST", "/v1/locks/fresh/leases", `{"owner":"` + strings.Repeat("a", 10<<20) + `"}`, json, 413, "payload-too-large", ""},
		{"JustOverLimit413", "POST", "/v1/locks/fresh/leases", `{"owner":"` + strings.Repeat("a", 64<<10) + `"}`, json, 413, "payload-too-large", ""},
		{"TextPlain415", "POST", "/v1/locks/fresh/leases", `{"owner":"a"}`, "text/plain", 415, "unsupported-media-type", ""},
		{"FormEncoded415", "POST", "/v1/locks/busy/leases/{L}/renew", `ttl_ms=100`, "application/x-www-form-urlencoded", 415, "unsupported-media-type", ""},
		{"NoContentType415", "POST", "/v1/locks/fresh/leases", `{"owner":"a"}`, "-", 415, "unsupported-media-type", ""},
		{"JSONSuffixType415", "POST", "/v1/locks/fresh/leases", `{"owner":"a"}`, "application/merge-patch+json", 415, "unsupported-media-type", ""},

		// Routes and methods.
		{"UnknownRoute404", "GET", "/v2/locks/busy", "", "", 404, "not-found", ""},
		{"UnknownSubroute404", "POST", "/v1/locks/busy/leases/{L}/extend", "", "", 404, "not-found", ""},
		{"UnknownRootPath404", "GET", "/index.html", "", "", 404, "not-found", ""}, // GET / is the dashboard's (TestRoot_RedirectsToTheDashboard)
		{"PutLock405", "PUT", "/v1/locks/busy", "", "", 405, "method-not-allowed", ""},
		{"GetLeases405", "GET", "/v1/locks/busy/leases", "", "", 405, "method-not-allowed", ""},
		{"PostHealthz405", "POST", "/healthz", "", "", 405, "method-not-allowed", ""},
		{"PutLease405", "PUT", "/v1/locks/busy/leases/{L}", `{"ttl_ms":100}`, json, 405, "method-not-allowed", ""},
		// PATCH replaces metadata only: a TTL there is refused, and nothing changes.
		{"PatchLeaseTTL", "PATCH", "/v1/locks/busy/leases/{L}", `{"ttl_ms":100}`, json, 400, "invalid-request", ""},
		{"GetMultiLeases405", "GET", "/v1/leases", "", "", 405, "method-not-allowed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.For(t)
			before := snapshot(t, e)
			path := strings.NewReplacer("{L}", busy.LeaseID, "{l}", strings.ToLower(busy.LeaseID)).Replace(tc.path)
			var hdr []string
			switch tc.ct {
			case "", json:
			case "-":
				hdr = []string{"Content-Type", ""}
			default:
				hdr = []string{"Content-Type", tc.ct}
			}
			resp := e.Malformed(t).Do(tc.method, path, tc.body, hdr...)
			p := WantProblem(t, resp, tc.status, tc.slug)
			if tc.field != "" && (len(p.Errors) == 0 || p.Errors[0].Field != tc.field) {
				t.Errorf("errors = %+v, want field %q first", p.Errors, tc.field)
			}
			if tc.status == 405 && resp.Header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
			if after := snapshot(t, e); !reflect.DeepEqual(before, after) {
				t.Fatalf("store changed:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}

// snapshot is everything the malformed requests could have touched.
func snapshot(t *testing.T, e *Env) []lock.State {
	t.Helper()
	ctx := context.Background()
	page, err := e.Mem.List(ctx, lock.ListRequest{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := page.Locks
	for _, name := range []string{"busy", "fresh"} {
		out = append(out, e.State(name))
	}
	// The remaining TTL moves with the clock, not with the store's state.
	for i := range out {
		if out[i].Holder != nil {
			h := *out[i].Holder
			h.ExpiresIn = 0
			out[i].Holder = &h
		}
		out[i].Holders = slices.Clone(out[i].Holders)
		for j := range out[i].Holders {
			out[i].Holders[j].ExpiresIn = 0
		}
	}
	return out
}

func TestMethodNotAllowed_Allow(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	for _, tc := range []struct{ method, path, allow string }{
		{"PUT", "/v1/locks/x", "GET, HEAD, DELETE"},
		{"GET", "/v1/locks/x/leases", "POST"},
		{"POST", "/v1/locks", "GET, HEAD"},
		{"GET", "/v1/leases", "POST, DELETE"},
	} {
		resp := e.Do(tc.method, tc.path, "")
		WantProblem(t, resp, http.StatusMethodNotAllowed, "method-not-allowed")
		if got := resp.Header.Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow = %q, want %q", tc.method, tc.path, got, tc.allow)
		}
	}
}

// TestBody_Chunked sends bodies of unknown length, which the server can only
// judge by reading them.
func TestBody_Chunked(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	for _, tc := range []struct {
		name, body, ct string
		status         int
		slug           string
	}{
		{"Valid201", `{"owner":"a"}`, "application/json", http.StatusCreated, ""},
		{"Oversized413", `{"owner":"` + strings.Repeat("a", 10<<20) + `"}`, "application/json", http.StatusRequestEntityTooLarge, "payload-too-large"},
		{"TextPlain415", `{"owner":"a"}`, "text/plain", http.StatusUnsupportedMediaType, "unsupported-media-type"},
		{"EmptyNoContentType201", ``, "", http.StatusCreated, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.Malformed(t)
			name := "chunked-" + strings.ToLower(tc.name)
			// io.MultiReader hides the length, so the body goes chunked.
			req, _ := http.NewRequest("POST", e.URL+"/v1/locks/"+name+"/leases", io.MultiReader(strings.NewReader(tc.body)))
			if tc.ct != "" {
				req.Header.Set("Content-Type", tc.ct)
			}
			resp, err := e.Client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			r := Response{Response: resp, Body: body}
			if tc.slug != "" {
				WantProblem(t, r, tc.status, tc.slug)
				if e.State(name).Held {
					t.Fatal("refused request took the lock")
				}
			} else if resp.StatusCode != tc.status {
				t.Fatalf("status = %d; %s", resp.StatusCode, body)
			}
		})
	}
}
