package tests

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
)

// hostileCase is one class of hostile request: what is sent, and the exact
// answer (status and problem type slug).
type hostileCase struct {
	class, name string
	c           call
	status      int
	typ         string
}

// hostileFixture is what the classes are sent against: a secured server
// on Redis, with keys that expired or were revoked by a reload, sessions
// at their quota, a regranted lock and an idempotent acquire.
type hostileFixture struct {
	*secured
	revoked, expired string // API keys
	la, lbShared     Lease
	regrantOld       string // release URL of the lease before the regrant
	sessA, sessB     string // team-a's and team-b's session ids
	uiCookie         *http.Cookie
}

// startHostile starts the fixture: everything it makes is made before the
// classes run, so that Redis must not change while they do.
func startHostile(t *testing.T) *hostileFixture {
	t.Helper()
	rw := []auth.Scope{auth.ScopeRead, auth.ScopeWrite}
	revoked := newKeyPair(t, "revoked")
	expiredKey, expiredLine, err := auth.NewKey("expired", rw, []string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	keysFile := filepath.Join(t.TempDir(), "keys")
	writeKeys(t, keysFile, revoked.line, expiredLine+" expires=2020-01-01T00:00:00Z")
	s := startSecured(t, "--max-ttl", "1h", "--api-keys-file", keysFile,
		"--max-sessions-per-principal", "2", "--max-webhooks-per-principal", "1")
	f := &hostileFixture{secured: s, revoked: revoked.key, expired: expiredKey}

	// The revoked key worked, until a reload took it out.
	if !works(t, s.server, revoked.key) {
		t.Fatal("the key to revoke never worked")
	}
	since := writeKeys(t, keysFile, newKeyPair(t, "stays").line)
	s.mu.Lock()
	_ = s.cmd.Process.Signal(syscall.SIGHUP)
	s.mu.Unlock()
	eventually(t, "the revoked key is refused", since, func() bool { return !works(t, s.server, revoked.key) })

	f.la = s.acquire(t, s.teamA, "team-a:job", `{"owner":"a1","ttl_ms":600000}`)
	f.lbShared = s.acquire(t, s.teamB, "shared:y", `{"owner":"b1","ttl_ms":600000}`)
	old := s.acquire(t, s.teamA, "team-a:regrant", `{"ttl_ms":600000}`)
	if r := s.do(t, call{method: "POST", path: old.releaseURL}); r.Status != 200 {
		t.Fatalf("release URL: %d %s", r.Status, r.Body)
	}
	f.regrantOld = old.releaseURL
	s.acquire(t, s.teamA, "team-a:regrant", `{"ttl_ms":600000}`)
	r := s.do(t, call{method: "POST", path: "/v1/locks/shared:idem/leases", key: s.teamA, body: `{"owner":"a","ttl_ms":600000}`,
		header: http.Header{"Idempotency-Key": {"same-key"}}})
	if r.Status != 201 {
		t.Fatalf("idempotent acquire: %d %s", r.Status, r.Body)
	}
	// team-a's sessions fill its quota of 2.
	newSession := func(key string) string {
		r := s.do(t, call{method: "POST", path: "/v1/sessions", key: key, body: `{"ttl_ms":3600000}`})
		var sess struct {
			ID string `json:"session_id"`
		}
		if r.Status != 201 {
			t.Fatalf("create session: %d %s", r.Status, r.Body)
		}
		r.decode(t, &sess)
		return sess.ID
	}
	f.sessA = newSession(s.teamA)
	newSession(s.teamA)
	f.sessB = newSession(s.teamB)
	f.uiCookie = uiSignIn(t, s.server, s.ops)
	return f
}

// TestSecurity_hostile_classes sends one request of each hostile class
// (docs/SECURITY.md, "Hostile inputs"): each gets its exact status and
// problem type, none a 5xx, and Redis holds exactly what it held before.
func TestSecurity_hostile_classes(t *testing.T) {
	f := startHostile(t)
	s := f.secured
	before := snapshot(t, s.rdb)
	cases := f.cases(t)
	classes := map[string]bool{}
	for _, c := range cases {
		classes[c.class+"/"+c.name] = true
	}
	if len(classes) != len(cases) || len(cases) < 60 {
		t.Fatalf("%d cases, %d distinct classes: want 60 distinct at least", len(cases), len(classes))
	}
	for _, c := range cases {
		t.Run(c.class+"/"+c.name, func(t *testing.T) {
			r := s.do(t, c.c)
			if r.Status != c.status || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") {
				t.Fatalf("%s %s: %d %s %s, want %d", c.c.method, c.c.path[:min(len(c.c.path), 80)], r.Status, r.Header.Get("Content-Type"), r.Body[:min(len(r.Body), 300)], c.status)
			}
			if p := r.problem(t); p.Type != problemType(c.typ) || p.Status != c.status {
				t.Fatalf("problem = %+v, want type %s", p, c.typ)
			}
		})
	}
	// Requests no Go client sends; most are answered by net/http itself,
	// before lockapi, in text/plain (openapi.yaml: "Answers before
	// lockapi").
	for _, c := range rawCases() {
		t.Run("headers/"+c.name, func(t *testing.T) {
			status, ct, head := rawExchange(t, s.addr, c.req)
			want := "text/plain"
			if c.typ != "" {
				want = "application/problem+json"
			}
			if status != c.status || !strings.HasPrefix(ct, want) || c.typ != "" && !strings.Contains(head, problemType(c.typ)) {
				t.Fatalf("%d %q, want %d %s %s:\n%s", status, ct, c.status, want, c.typ, head)
			}
		})
	}
	t.Run("headers/X-Request-ID not printable is replaced", func(t *testing.T) {
		r := s.do(t, call{method: "POST", path: "/v1/locks/team-a:x/leases", header: http.Header{"X-Request-Id": {"abc\u00e9<x>"}}})
		if r.Status != 401 || r.Header.Get("X-Request-Id") == "abc\u00e9<x>" || r.Header.Get("X-Request-Id") == "" {
			t.Fatalf("%d, X-Request-ID %q", r.Status, r.Header.Get("X-Request-Id"))
		}
	})
	if after := snapshot(t, s.rdb); after != before {
		t.Fatalf("hostile requests changed Redis:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if strings.Contains(s.Logs(), `"status":5`) {
		t.Fatal("a hostile request was answered with a 5xx")
	}
}

// cases lists the classes answered by lockapi itself, as problems.
func (f *hostileFixture) cases(t *testing.T) []hostileCase {
	s := f.secured
	leaseA := "/v1/locks/team-a:job/leases/" + f.la.LeaseID
	u, err := url.Parse(f.la.releaseURL)
	if err != nil {
		t.Fatal(err)
	}
	sig, exp := u.Query().Get("sig"), u.Query().Get("exp")
	post := func(path, key, body string) call {
		return call{method: "POST", path: path, key: key, body: body}
	}
	acq := func(body string) call { return post("/v1/locks/team-a:x/leases", s.teamA, body) }
	withHeader := func(c call, kv ...string) call {
		c.header = http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			c.header[kv[i]] = append(c.header[kv[i]], kv[i+1])
		}
		return c
	}
	hook := func(u string) call {
		return post("/v1/webhooks", s.ops, `{"url":"`+u+`","prefix":"team-a:"}`)
	}
	deep := strings.Repeat("[", 30000) + strings.Repeat("]", 30000)
	digits := strings.Repeat("9", 60000)
	var cases []hostileCase
	add := func(class string, list ...hostileCase) {
		for _, c := range list {
			c.class = class
			cases = append(cases, c)
		}
	}
	bad, forbidden, unauthorized := "invalid-request", "forbidden", "unauthorized"
	add("names",
		hostileCase{name: "double-encoded slash", c: call{method: "GET", path: "/v1/locks/team-a:x%252Fy", key: s.teamA}, status: 400, typ: bad},
		hostileCase{name: "double-encoded dots", c: call{method: "GET", path: "/v1/locks/%252E%252E", key: s.teamA}, status: 400, typ: bad},
		hostileCase{name: "overlong UTF-8 slash", c: call{method: "GET", path: "/v1/locks/team-a:a%C0%AFb", key: s.teamA}, status: 400, typ: bad},
		hostileCase{name: "overlong UTF-8 NUL", c: call{method: "POST", path: "/v1/locks/team-a:a%C0%80/leases", key: s.teamA}, status: 400, typ: bad},
		hostileCase{name: "NUL", c: call{method: "POST", path: "/v1/locks/team-a:a%00/leases", key: s.teamA}, status: 400, typ: bad},
		hostileCase{name: "U+FFFD", c: call{method: "GET", path: "/v1/locks/team-a:%EF%BF%BD", key: s.teamA}, status: 400, typ: bad},
		hostileCase{name: "Cyrillic a confusable", c: call{method: "POST", path: "/v1/locks/team-%D0%B0:job/leases", key: s.teamA}, status: 400, typ: bad},
		hostileCase{name: "fullwidth colon", c: call{method: "GET", path: "/v1/locks/team-a%EF%BC%9Ajob", key: s.teamA}, status: 400, typ: bad},
		hostileCase{name: "zero-width space", c: call{method: "DELETE", path: "/v1/locks/team-a:job%E2%80%8B/leases/" + f.la.LeaseID, key: s.teamA}, status: 400, typ: bad},
		hostileCase{name: "1 MB name in a multi-acquire body", c: post("/v1/leases", s.teamA, `{"locks":["team-a:`+strings.Repeat("n", 1<<20)+`"]}`), status: 413, typ: "payload-too-large"},
		hostileCase{name: "60 KB name in a listing prefix", c: call{method: "GET", path: "/v1/locks?prefix=" + strings.Repeat("p", 60000), key: s.ops}, status: 400, typ: bad},
		hostileCase{name: "reserved name", c: call{method: "POST", path: "/v1/locks/lockapi.webhook.x/leases", key: s.ops}, status: 403, typ: "reserved-name"},
	)
	add("bodies",
		hostileCase{name: "nesting 30000 deep", c: acq(`{"metadata":{"k":` + deep + `}}`), status: 400, typ: bad},
		hostileCase{name: "nesting deep in an unknown member", c: acq(`{"x":` + deep + `}`), status: 400, typ: bad},
		hostileCase{name: "number of 60000 digits", c: acq(`{"ttl_ms":` + digits + `}`), status: 400, typ: bad},
		hostileCase{name: "exponent overflow in limit", c: acq(`{"limit":1e999999999}`), status: 400, typ: bad},
		hostileCase{name: "duplicate key in a multi-acquire", c: post("/v1/leases", s.teamA, `{"locks":["team-a:m"],"owner":"a","owner":"b"}`), status: 400, typ: bad},
		hostileCase{name: "duplicate metadata key at depth", c: post("/v1/leases", s.teamA, `{"locks":["team-a:m"],"metadata":{"k":"1","k":"2"}}`), status: 400, typ: bad},
		hostileCase{name: "duplicate key in a session body", c: post("/v1/sessions", s.teamB, `{"ttl_ms":1000,"ttl_ms":2000}`), status: 400, typ: bad},
		hostileCase{name: "trailing garbage on a session", c: post("/v1/sessions", s.teamB, `{}garbage`), status: 400, typ: bad},
		hostileCase{name: "trailing NUL", c: acq("{}\x00"), status: 400, typ: bad},
		hostileCase{name: "byte order mark", c: acq("\xef\xbb\xbf{}"), status: 400, typ: bad},
		hostileCase{name: "UTF-16 body", c: call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: "\xff\xfe{\x00}\x00", contentType: "application/json; charset=utf-16"}, status: 400, typ: bad},
		hostileCase{name: "gzip body (no coding is decoded)", c: withHeader(acq("\x1f\x8b\x08\x00\x00\x00\x00\x00"), "Content-Encoding", "gzip"), status: 415, typ: "unsupported-media-type"},
		hostileCase{name: "identity coding twice", c: withHeader(acq("{}"), "Content-Encoding", "identity", "Content-Encoding", "gzip"), status: 415, typ: "unsupported-media-type"},
		hostileCase{name: "multipart body", c: call{method: "POST", path: "/v1/sessions", key: s.teamB, body: "--b\r\n\r\n{}\r\n--b--", contentType: "multipart/form-data; boundary=b"}, status: 415, typ: "unsupported-media-type"},
		hostileCase{name: "XML body", c: call{method: "POST", path: "/v1/webhooks", key: s.ops, body: "<url>x</url>", contentType: "application/xml"}, status: 415, typ: "unsupported-media-type"},
		hostileCase{name: "JSON sent as XML", c: call{method: "POST", path: leaseA + "/renew", key: s.teamA, body: "<ttl_ms>1</ttl_ms>"}, status: 400, typ: bad},
	)
	add("headers",
		hostileCase{name: "Last-Event-ID with a script", c: withHeader(call{method: "GET", path: "/v1/events", key: s.teamA}, "Last-Event-ID", "1-0<script>"), status: 400, typ: bad},
		hostileCase{name: "Last-Event-ID path", c: withHeader(call{method: "GET", path: "/v1/events", key: s.teamA}, "Last-Event-ID", "../../etc/passwd"), status: 400, typ: bad},
		hostileCase{name: "Last-Event-ID of 10000 digits", c: withHeader(call{method: "GET", path: "/v1/events", key: s.teamA}, "Last-Event-ID", strings.Repeat("1", 10000)+"-0"), status: 400, typ: bad},
		hostileCase{name: "Last-Event-ID twice", c: withHeader(call{method: "GET", path: "/v1/events", key: s.teamA}, "Last-Event-ID", "1-0", "Last-Event-ID", "2-0"), status: 400, typ: bad},
		hostileCase{name: "Idempotency-Key of 256 characters", c: withHeader(acq(`{}`), "Idempotency-Key", strings.Repeat("k", 256)), status: 400, typ: bad},
		hostileCase{name: "Idempotency-Key twice", c: withHeader(acq(`{}`), "Idempotency-Key", "a", "Idempotency-Key", "b"), status: 400, typ: bad},
		hostileCase{name: "cross-site Origin", c: withHeader(acq(`{}`), "Origin", "https://evil.example"), status: 403, typ: forbidden},
		hostileCase{name: "Sec-Fetch-Site cross-site", c: withHeader(call{method: "DELETE", path: leaseA, key: s.teamA}, "Sec-Fetch-Site", "cross-site"), status: 403, typ: forbidden},
	)
	add("auth",
		hostileCase{name: "key in the query string", c: call{method: "GET", path: "/v1/locks/team-a:job?api_key=" + s.teamA}, status: 401, typ: unauthorized},
		hostileCase{name: "key as access_token", c: call{method: "POST", path: "/v1/locks/team-a:x/leases?access_token=" + s.teamA}, status: 401, typ: unauthorized},
		hostileCase{name: "Basic scheme", c: withHeader(call{method: "GET", path: "/v1/locks/team-a:job"}, "Authorization", "Basic "+s.teamA), status: 401, typ: unauthorized},
		hostileCase{name: "two Authorization headers", c: withHeader(call{method: "GET", path: "/v1/locks/team-a:job"}, "Authorization", "Bearer "+s.teamA, "Authorization", "Bearer "+s.teamB), status: 401, typ: unauthorized},
		hostileCase{name: "expired key", c: call{method: "GET", path: "/v1/locks/team-a:job", key: f.expired}, status: 401, typ: unauthorized},
		hostileCase{name: "key revoked by a reload", c: post("/v1/locks/team-a:x/leases", f.revoked, ""), status: 401, typ: unauthorized},
		hostileCase{name: "dashboard cookie on the API", c: withHeader(call{method: "DELETE", path: "/v1/locks/team-a:job"}, "Cookie", f.uiCookie.String()), status: 401, typ: unauthorized},
		hostileCase{name: "dashboard cookie on a listing", c: withHeader(call{method: "GET", path: "/v1/locks"}, "Cookie", f.uiCookie.String()), status: 401, typ: unauthorized},
	)
	add("other principal",
		hostileCase{name: "acquire", c: post("/v1/locks/team-a:job/leases", s.teamB, ""), status: 403, typ: forbidden},
		hostileCase{name: "renew", c: post(leaseA+"/renew", s.teamB, ""), status: 403, typ: forbidden},
		hostileCase{name: "inspect", c: call{method: "GET", path: "/v1/locks/team-a:job", key: s.teamB}, status: 403, typ: forbidden},
		hostileCase{name: "force release", c: call{method: "DELETE", path: "/v1/locks/team-a:job", key: s.teamB}, status: 403, typ: forbidden},
		hostileCase{name: "multi-acquire", c: post("/v1/leases", s.teamB, `{"locks":["team-b:m","team-a:job"]}`), status: 403, typ: forbidden},
		hostileCase{name: "multi-release", c: call{method: "DELETE", path: "/v1/leases?id=team-a:job/" + f.la.LeaseID, key: s.teamB}, status: 403, typ: forbidden},
		hostileCase{name: "event stream", c: call{method: "GET", path: "/v1/events?lock=team-a:job", key: s.teamB}, status: 403, typ: forbidden},
		hostileCase{name: "webhook create", c: post("/v1/webhooks", s.teamB, `{"url":"https://1.1.1.1/","prefix":"team-b:"}`), status: 403, typ: forbidden},
		hostileCase{name: "webhook list", c: call{method: "GET", path: "/v1/webhooks", key: s.teamB}, status: 403, typ: forbidden},
		hostileCase{name: "webhook delete", c: call{method: "DELETE", path: "/v1/webhooks/wh_x", key: s.teamB}, status: 403, typ: forbidden},
		hostileCase{name: "webhook ping", c: post("/v1/webhooks/wh_x/ping", s.teamB, ""), status: 403, typ: forbidden},
		hostileCase{name: "dead letters", c: call{method: "GET", path: "/v1/webhooks/wh_x/dead-letters", key: s.reader}, status: 403, typ: forbidden},
		hostileCase{name: "replay", c: post("/v1/webhooks/wh_x/dead-letters/1-0/replay", s.teamA, ""), status: 403, typ: forbidden},
		hostileCase{name: "read-only key creates a session", c: post("/v1/sessions", s.reader, ""), status: 403, typ: forbidden},
	)
	add("release URLs",
		hostileCase{name: "replayed after a regrant", c: post(f.regrantOld, "", ""), status: 410, typ: "lease-lost"},
		hostileCase{name: "signature of another lock", c: post("/v1/locks/team-a:regrant/leases/"+f.la.LeaseID+"/release?exp="+exp+"&sig="+sig, "", ""), status: 403, typ: forbidden},
		hostileCase{name: "signature in standard base64", c: post(u.Path+"?exp="+exp+"&sig="+url.QueryEscape(strings.NewReplacer("-", "+", "_", "/").Replace(sig)+"="), "", ""), status: 403, typ: forbidden},
		hostileCase{name: "exp of the far future", c: post(u.Path+"?exp=99999999999&sig="+sig, "", ""), status: 403, typ: forbidden},
		hostileCase{name: "signature twice", c: post(u.Path+"?exp="+exp+"&sig="+sig+"&sig="+sig, "", ""), status: 400, typ: bad},
	)
	add("sessions",
		hostileCase{name: "bind to another principal's session", c: post("/v1/locks/team-b:s/leases", s.teamB, `{"session":"`+f.sessA+`"}`), status: 404, typ: "session-not-found"},
		hostileCase{name: "read another principal's session", c: call{method: "GET", path: "/v1/sessions/" + f.sessA, key: s.teamB}, status: 404, typ: "session-not-found"},
		hostileCase{name: "renew another principal's session", c: post("/v1/sessions/"+f.sessA+"/renew", s.teamB, ""), status: 404, typ: "session-not-found"},
		hostileCase{name: "delete another principal's session", c: call{method: "DELETE", path: "/v1/sessions/" + f.sessB, key: s.teamA}, status: 404, typ: "session-not-found"},
		hostileCase{name: "unknown id", c: call{method: "GET", path: "/v1/sessions/01HZZZZZZZZZZZZZZZZZZZZZZZ", key: s.teamA}, status: 404, typ: "session-not-found"},
		hostileCase{name: "id in lower case", c: call{method: "DELETE", path: "/v1/sessions/" + strings.ToLower(f.sessA), key: s.teamA}, status: 400, typ: bad},
		hostileCase{name: "id of 27 characters", c: post("/v1/sessions/"+f.sessA+"0/renew", s.teamA, ""), status: 400, typ: bad},
		hostileCase{name: "acquire with a session id in the wrong form", c: acq(`{"session":"../` + f.sessA + `"}`), status: 400, typ: bad},
		hostileCase{name: "past the principal's quota", c: post("/v1/sessions", s.teamA, `{"ttl_ms":3600000}`), status: 429, typ: "quota-exceeded"},
	)
	add("idempotency keys",
		hostileCase{name: "same key, owner and name, other principal", c: withHeader(post("/v1/locks/shared:idem/leases", s.teamB, `{"owner":"a"}`), "Idempotency-Key", "same-key"), status: 409, typ: "lock-held"},
		hostileCase{name: "same key and principal, other name", c: withHeader(post("/v1/locks/team-a:job/leases", s.teamA, `{"owner":"a"}`), "Idempotency-Key", "same-key"), status: 409, typ: "lock-held"},
		hostileCase{name: "same key and name, other owner", c: withHeader(post("/v1/locks/shared:idem/leases", s.teamA, `{"owner":"b"}`), "Idempotency-Key", "same-key"), status: 409, typ: "lock-held"},
		hostileCase{name: "key with a control character", c: withHeader(acq(`{}`), "Idempotency-Key", "a\tb"), status: 400, typ: bad},
	)
	add("webhook SSRF",
		hostileCase{name: "IPv6 loopback", c: hook("https://[::1]/"), status: 400, typ: bad},
		hostileCase{name: "IPv4-mapped IPv6 loopback", c: hook("https://[::ffff:127.0.0.1]/"), status: 400, typ: bad},
		hostileCase{name: "IPv4-mapped IPv6 in hex", c: hook("https://[::ffff:7f00:1]/"), status: 400, typ: bad},
		hostileCase{name: "NAT64 of loopback", c: hook("https://[64:ff9b::7f00:1]/"), status: 400, typ: bad},
		hostileCase{name: "IPv6 link-local with a zone", c: hook("https://[fe80::1%25eth0]/"), status: 400, typ: bad},
		hostileCase{name: "decimal IPv4", c: hook("https://2130706433/"), status: 400, typ: bad},
		hostileCase{name: "octal IPv4", c: hook("https://0177.0.0.1/"), status: 400, typ: bad},
		hostileCase{name: "hex IPv4", c: hook("https://0x7f.0.0.1/"), status: 400, typ: bad},
		hostileCase{name: "short IPv4", c: hook("https://127.1/"), status: 400, typ: bad},
		hostileCase{name: "0.0.0.0", c: hook("https://0.0.0.0/"), status: 400, typ: bad},
		hostileCase{name: "cloud metadata address", c: hook("https://169.254.169.254/latest/meta-data/"), status: 400, typ: bad},
		hostileCase{name: "private range", c: hook("https://10.0.0.1/"), status: 400, typ: bad},
		hostileCase{name: "localhost with a trailing dot", c: hook("https://localhost./"), status: 400, typ: bad},
		hostileCase{name: "name under localhost", c: hook("https://evil.localhost/"), status: 400, typ: bad},
		hostileCase{name: "plain http", c: hook("http://1.1.1.1/"), status: 400, typ: bad},
		hostileCase{name: "scheme file", c: hook("file:///etc/passwd"), status: 400, typ: bad},
	)
	return cases
}

// rawCase is a request that net/http answers itself, before lockapi.
type rawCase struct {
	name   string
	req    string
	status int
	typ    string // the problem type lockapi answers; "": net/http's text/plain
}

func rawCases() []rawCase {
	var many strings.Builder
	for i := range 9000 {
		fmt.Fprintf(&many, "X-H%d: v\r\n", i)
	}
	return []rawCase{
		{"1 MB name in the path", "GET /v1/locks/team-a:" + strings.Repeat("n", 1<<20) + " HTTP/1.1\r\nHost: x\r\n\r\n", 431, ""},
		{"header of 70 KiB", "GET /v1/locks/team-a:x HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", 431, ""},
		{"9000 headers", "GET /v1/locks/team-a:x HTTP/1.1\r\nHost: x\r\n" + many.String() + "\r\n", 431, ""},
		{"CR alone in a header value", "GET /v1/locks/team-a:x HTTP/1.1\r\nHost: x\r\nX-Request-ID: a\rSet-Cookie: x=1\r\n\r\n", 400, ""},
		// A bare LF ends a header line (RFC 9112 §2.2): what follows is a
		// header of its own, and the request is lockapi's to answer.
		{"LF alone in a header value", "GET /v1/locks/team-a:x HTTP/1.1\r\nHost: x\r\nX-Request-ID: a\nAuthorization: Bearer x\r\nConnection: close\r\n\r\n", 401, "unauthorized"},
		{"NUL in a header value", "GET /v1/locks/team-a:x HTTP/1.1\r\nHost: x\r\nX-Request-ID: a\x00b\r\n\r\n", 400, ""},
		{"space before the colon", "GET /v1/locks/team-a:x HTTP/1.1\r\nHost: x\r\nAuthorization : Bearer x\r\n\r\n", 400, ""},
		{"chunked and a Content-Length", "POST /v1/locks/team-a:x/leases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n0\r\n\r\n", 501, ""},
	}
}

// rawExchange sends req on a connection of its own and returns the
// answer's status, Content-Type and head.
func rawExchange(t *testing.T, addr, req string) (int, string, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	go io.WriteString(conn, req) // the server may answer before it reads all
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// TestSecurity_quotas: past LOCKAPI_MAX_SESSIONS_PER_PRINCIPAL live
// sessions, or LOCKAPI_MAX_WEBHOOKS_PER_PRINCIPAL webhooks, a create is
// answered 429 quota-exceeded (as openapi.yaml documents it); another
// principal is not affected, and ending one frees its place.
func TestSecurity_quotas(t *testing.T) {
	s := startSecured(t, "--max-sessions-per-principal", "2", "--max-webhooks-per-principal", "1")
	quota := func(r response) {
		t.Helper()
		if p := r.problem(t); r.Status != 429 || p.Type != problemType("quota-exceeded") {
			t.Fatalf("past the quota: %d %s", r.Status, r.Body)
		}
		// Waiting does not help, so nothing tells the client to retry.
		if ra := r.Header.Get("Retry-After"); ra != "" {
			t.Fatalf("past the quota: Retry-After %q", ra)
		}
	}
	create := func(key string) response {
		return s.do(t, call{method: "POST", path: "/v1/sessions", key: key, body: `{"ttl_ms":60000}`})
	}
	var first struct {
		ID string `json:"session_id"`
	}
	for i := range 2 {
		r := create(s.teamA)
		if r.Status != 201 {
			t.Fatalf("session %d: %d %s", i, r.Status, r.Body)
		}
		r.decode(t, &first)
	}
	quota(create(s.teamA))
	if r := create(s.teamB); r.Status != 201 {
		t.Fatalf("another principal's session: %d %s", r.Status, r.Body)
	}
	if r := s.do(t, call{method: "DELETE", path: "/v1/sessions/" + first.ID, key: s.teamA}); r.Status != 200 {
		t.Fatalf("delete session: %d %s", r.Status, r.Body)
	}
	if r := create(s.teamA); r.Status != 201 {
		t.Fatalf("a session after one ended: %d %s", r.Status, r.Body)
	}

	hook := func(url string) response {
		return s.do(t, call{method: "POST", path: "/v1/webhooks", key: s.ops, body: `{"url":"` + url + `","prefix":"quota-none:"}`})
	}
	r := hook("https://1.1.1.1/a")
	if r.Status != 201 {
		t.Fatalf("webhook: %d %s", r.Status, r.Body)
	}
	var wh struct {
		ID string `json:"id"`
	}
	r.decode(t, &wh)
	quota(hook("https://1.1.1.1/b"))
	if r := s.do(t, call{method: "DELETE", path: "/v1/webhooks/" + wh.ID, key: s.ops}); r.Status != 204 && r.Status != 200 {
		t.Fatalf("delete webhook: %d %s", r.Status, r.Body)
	}
	if r := hook("https://1.1.1.1/b"); r.Status != 201 {
		t.Fatalf("a webhook after one was deleted: %d %s", r.Status, r.Body)
	}
}
