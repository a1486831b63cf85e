package tests

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/testkit/apitest"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

const releaseSecret = "test-release-secret-0123456789"

// secured is a lockapi with API keys on a Redis the test can look into.
type secured struct {
	*server
	rdb                       *redis.Client
	teamA, teamB, reader, ops string // API keys
	signer                    *auth.ReleaseSigner
}

func startSecured(t *testing.T, args ...string) *secured {
	t.Helper()
	newKey := func(principal string, scopes []auth.Scope, patterns ...string) (string, string) {
		key, line, err := auth.NewKey(principal, scopes, patterns)
		if err != nil {
			t.Fatal(err)
		}
		return key, line
	}
	rw := []auth.Scope{auth.ScopeRead, auth.ScopeWrite}
	s := &secured{}
	var lines [4]string
	s.teamA, lines[0] = newKey("team-a", rw, "team-a:*", "shared:*")
	s.teamB, lines[1] = newKey("team-b", rw, "team-b:*", "shared:*")
	s.reader, lines[2] = newKey("reader", []auth.Scope{auth.ScopeRead}, "*")
	s.ops, lines[3] = newKey("ops", []auth.Scope{auth.ScopeAdmin}, "*")
	rs := redistest.Start(t)
	s.rdb = rs.Client(t)
	var err error
	if s.signer, err = auth.NewReleaseSigner([]byte(releaseSecret)); err != nil {
		t.Fatal(err)
	}
	s.server = startServer(t, []string{
		"LOCKAPI_REDIS_URL=" + rs.URL,
		"LOCKAPI_API_KEYS=" + strings.Join(lines[:], ";"),
		"LOCKAPI_RELEASE_SECRETS=" + releaseSecret,
	}, args...)
	return s
}

// call sends one request with an optional key and raw body, through a
// client that validates the response against openapi.yaml.
type call struct {
	method, path string
	key          string
	body         string
	contentType  string
	header       http.Header // more headers, set as they are
}

func (s *secured) do(t *testing.T, c call) response {
	t.Helper()
	client := apitest.NewClient(t, s.URL)
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, s.URL+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if c.body != "" {
		ct := c.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

func (s *secured) acquire(t *testing.T, key, name, body string) Lease {
	t.Helper()
	r := s.do(t, call{method: "POST", path: "/v1/locks/" + name + "/leases", key: key, body: body})
	if r.Status != 201 {
		t.Fatalf("acquire %s: %d %s", name, r.Status, r.Body)
	}
	var l struct {
		Lease
		ReleaseURL string `json:"release_url"`
	}
	r.decode(t, &l)
	l.Lease.releaseURL = l.ReleaseURL
	return l.Lease
}

// snapshot reads every key Redis holds, with its value, so a test can show
// that requests changed nothing.
func snapshot(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		typ := rdb.Type(ctx, k).Val()
		switch typ {
		case "hash":
			h := rdb.HGetAll(ctx, k).Val()
			var fields []string
			for f, v := range h {
				fields = append(fields, f+"="+v)
			}
			sort.Strings(fields)
			fmt.Fprintf(&b, "%s %s %v\n", k, typ, fields)
		default:
			fmt.Fprintf(&b, "%s %s %q\n", k, typ, rdb.Dump(ctx, k).Val())
		}
	}
	return b.String()
}

// TestSecurity_hostile_requests sends malformed and hostile requests: each
// gets its 4xx problem, none a 5xx, and Redis holds exactly what it held
// before.
func TestSecurity_hostile_requests(t *testing.T) {
	s := startSecured(t, "--max-waiters-per-caller", "20", "--max-ttl", "1h")
	la := s.acquire(t, s.teamA, "team-a:job", `{"owner":"a1","ttl_ms":600000}`)
	s.acquire(t, s.teamB, "team-b:job", `{"owner":"b1","ttl_ms":600000}`)
	lbShared := s.acquire(t, s.teamB, "shared:y", `{"owner":"b1","ttl_ms":600000}`)
	// A lease released through its URL, to replay the URL later.
	gone := s.acquire(t, s.teamA, "team-a:gone", `{"ttl_ms":600000}`)
	if r := s.do(t, call{method: "POST", path: gone.releaseURL}); r.Status != 200 {
		t.Fatalf("release URL: %d %s", r.Status, r.Body)
	}
	before := snapshot(t, s.rdb)

	u, err := url.Parse(la.releaseURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	sig, exp := q.Get("sig"), q.Get("exp")
	tamperedSig := "A" + sig[1:]
	if tamperedSig == sig {
		tamperedSig = "B" + sig[1:]
	}
	releaseBase := "/v1/locks/team-a:job/leases/" + la.LeaseID + "/release"
	expired := s.signer.ReleasePath("team-a:job", la.LeaseID, time.Now().Add(-time.Minute))
	big := strings.Repeat("x", 10<<20)
	meta17 := map[int]bool{}
	var sb strings.Builder
	sb.WriteString(`{"metadata":{`)
	for i := 0; i < 17; i++ {
		meta17[i] = true
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `"k%d":"v"`, i)
	}
	sb.WriteString(`}}`)
	leaseA := "/v1/locks/team-a:job/leases/" + la.LeaseID
	leaseBShared := "/v1/locks/shared:y/leases/" + lbShared.LeaseID

	cases := []struct {
		name   string
		c      call
		status int
		typ    string
	}{
		{"no key", call{method: "POST", path: "/v1/locks/team-a:x/leases"}, 401, "unauthorized"},
		{"invalid key", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: "lka_not-a-real-key"}, 401, "unauthorized"},
		{"key of another length", call{method: "GET", path: "/v1/locks/team-a:job", key: s.teamA + "x"}, 401, "unauthorized"},
		{"no key on inspect", call{method: "GET", path: "/v1/locks/team-a:job"}, 401, "unauthorized"},
		{"no key on list", call{method: "GET", path: "/v1/locks"}, 401, "unauthorized"},
		{"no key on force release", call{method: "DELETE", path: "/v1/locks/team-a:job"}, 401, "unauthorized"},
		{"no key on release", call{method: "DELETE", path: leaseA}, 401, "unauthorized"},
		{"name outside patterns: acquire", call{method: "POST", path: "/v1/locks/team-b:x/leases", key: s.teamA}, 403, "forbidden"},
		{"name outside patterns: inspect", call{method: "GET", path: "/v1/locks/team-b:job", key: s.teamA}, 403, "forbidden"},
		{"name outside patterns: blocking query", call{method: "GET", path: "/v1/locks/payments:1?index=x&wait_ms=1000", key: s.teamA}, 403, "forbidden"},
		{"another principal's lease: release", call{method: "DELETE", path: leaseBShared, key: s.teamA}, 403, "forbidden"},
		{"another principal's lease: release all", call{method: "DELETE", path: leaseBShared + "?all=true", key: s.teamA}, 403, "forbidden"},
		{"another principal's lease: renew", call{method: "POST", path: leaseBShared + "/renew", key: s.teamA}, 403, "forbidden"},
		{"another principal's lease outside patterns", call{method: "DELETE", path: "/v1/locks/team-a:job/leases/" + la.LeaseID, key: s.teamB}, 403, "forbidden"},
		{"admin call without scope: list", call{method: "GET", path: "/v1/locks", key: s.teamA}, 403, "forbidden"},
		{"admin call without scope: force release", call{method: "DELETE", path: "/v1/locks/team-a:job", key: s.teamA}, 403, "forbidden"},
		{"read-only key acquires", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.reader}, 403, "forbidden"},
		{"read-only key releases", call{method: "DELETE", path: leaseA, key: s.reader}, 403, "forbidden"},
		{"tampered release URL", call{method: "POST", path: releaseBase + "?exp=" + exp + "&sig=" + tamperedSig}, 403, "forbidden"},
		{"release URL with a later exp", call{method: "POST", path: releaseBase + "?exp=9" + exp + "&sig=" + sig}, 403, "forbidden"},
		{"release URL for another lease", call{method: "POST", path: "/v1/locks/shared:y/leases/" + lbShared.LeaseID + "/release?exp=" + exp + "&sig=" + sig}, 403, "forbidden"},
		{"release URL with a short sig", call{method: "POST", path: releaseBase + "?exp=" + exp + "&sig=AAAA"}, 403, "forbidden"},
		{"release URL cut before its sig", call{method: "POST", path: releaseBase + "?exp=" + exp}, 400, "invalid-request"},
		{"expired release URL", call{method: "POST", path: expired}, 403, "forbidden"},
		{"release URL replayed after release", call{method: "POST", path: gone.releaseURL}, 410, "lease-lost"},
		{"bad JSON", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"owner":`}, 400, "invalid-request"},
		{"trailing data", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{}{}`}, 400, "invalid-request"},
		{"unknown field", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"owner":"a","ttl":5}`}, 400, "invalid-request"},
		{"wrong type ttl", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"ttl_ms":"30000"}`}, 400, "invalid-request"},
		{"wrong type owner", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"owner":7}`}, 400, "invalid-request"},
		{"wrong type metadata", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"metadata":["a"]}`}, 400, "invalid-request"},
		{"metadata value not a string", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"metadata":{"a":1}}`}, 400, "invalid-request"},
		{"huge number", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"ttl_ms":1e400}`}, 400, "invalid-request"},
		{"int64 overflow", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"wait_ms":99999999999999999999}`}, 400, "invalid-request"},
		{"fractional ttl", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"ttl_ms":1000.5}`}, 400, "invalid-request"},
		{"negative ttl", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"ttl_ms":-1}`}, 400, "invalid-request"},
		{"negative wait", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"wait_ms":-5}`}, 400, "invalid-request"},
		{"ttl below 10ms", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"ttl_ms":9}`}, 400, "invalid-request"},
		{"ttl above the maximum", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"ttl_ms":3600001}`}, 400, "invalid-request"},
		{"17 metadata keys", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: sb.String()}, 400, "invalid-request"},
		{"metadata over 4 KiB", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"metadata":{"k":"` + strings.Repeat("v", 4100) + `"}}`}, 400, "invalid-request"},
		{"owner of 129 characters", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"owner":"` + strings.Repeat("o", 129) + `"}`}, 400, "invalid-request"},
		{"owner with a control character", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"owner":"a\u0001b"}`}, 400, "invalid-request"},
		{"empty owner", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"owner":""}`}, 400, "invalid-request"},
		{"duplicate member", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"owner":"a","owner":"b"}`}, 400, "invalid-request"},
		{"duplicate metadata key", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"metadata":{"k":"1","\u006b":"2"}}`}, 400, "invalid-request"},
		{"invalid UTF-8 in a string", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: "{\"owner\":\"\xff\xfe\"}"}, 400, "invalid-request"},
		{"lone surrogate in owner", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"owner":"\ud800"}`}, 400, "invalid-request"},
		{"body is null", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `null`}, 400, "invalid-request"},
		{"body is an array", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `[{}]`}, 400, "invalid-request"},
		{"unicode name", call{method: "POST", path: "/v1/locks/team-a:d%C3%A9ploy/leases", key: s.teamA}, 400, "invalid-request"},
		{"control character in name", call{method: "POST", path: "/v1/locks/team-a:x%01/leases", key: s.teamA}, 400, "invalid-request"},
		{"space in name", call{method: "GET", path: "/v1/locks/team-a:x%20y", key: s.teamA}, 400, "invalid-request"},
		{"name with braces", call{method: "GET", path: "/v1/locks/team-a:%7Bx%7D", key: s.teamA}, 400, "invalid-request"},
		{"name of 201 characters", call{method: "GET", path: "/v1/locks/team-a:" + strings.Repeat("n", 194), key: s.teamA}, 400, "invalid-request"},
		{"lease id not a ULID", call{method: "DELETE", path: "/v1/locks/team-a:job/leases/not-a-ulid", key: s.teamA}, 400, "invalid-request"},
		{"lease id lower case", call{method: "DELETE", path: "/v1/locks/team-a:job/leases/" + strings.ToLower(la.LeaseID), key: s.teamA}, 400, "invalid-request"},
		{"all is not a boolean", call{method: "DELETE", path: leaseA + "?all=maybe", key: s.teamA}, 400, "invalid-request"},
		{"renew ttl of 0", call{method: "POST", path: leaseA + "/renew", key: s.teamA, body: `{"ttl_ms":0}`}, 400, "invalid-request"},
		{"negative blocking wait", call{method: "GET", path: "/v1/locks/team-a:job?index=x&wait_ms=-1", key: s.teamA}, 400, "invalid-request"},
		{"repeated query parameter", call{method: "GET", path: "/v1/locks/team-a:job?index=a&index=b", key: s.teamA}, 400, "invalid-request"},
		{"list limit 0", call{method: "GET", path: "/v1/locks?limit=0", key: s.ops}, 400, "invalid-request"},
		{"list limit not a number", call{method: "GET", path: "/v1/locks?limit=ten", key: s.ops}, 400, "invalid-request"},
		{"list bad cursor", call{method: "GET", path: "/v1/locks?cursor=garbage", key: s.ops}, 400, "invalid-request"},
		{"list prefix with a wildcard", call{method: "GET", path: "/v1/locks?prefix=team-*", key: s.ops}, 400, "invalid-request"},
		{"10 MiB body", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{"owner":"` + big + `"}`}, 413, "payload-too-large"},
		{"10 MiB renew body", call{method: "POST", path: leaseA + "/renew", key: s.teamA, body: `{"ttl_ms":1000,"x":"` + big + `"}`}, 413, "payload-too-large"},
		{"text/plain body", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `{}`, contentType: "text/plain"}, 415, "unsupported-media-type"},
		{"form body", call{method: "POST", path: "/v1/locks/team-a:x/leases", key: s.teamA, body: `owner=a`, contentType: "application/x-www-form-urlencoded"}, 415, "unsupported-media-type"},
		{"wrong method", call{method: "PUT", path: "/v1/locks/team-a:job", key: s.teamA}, 405, "method-not-allowed"},
		{"unknown route", call{method: "GET", path: "/v2/locks", key: s.teamA}, 404, "not-found"},
	}
	if len(cases) < 50 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := s.do(t, c.c)
			if r.Status != c.status || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") {
				t.Fatalf("%s %s: %d %s %s, want %d", c.c.method, c.c.path[:min(len(c.c.path), 80)], r.Status, r.Header.Get("Content-Type"), r.Body[:min(len(r.Body), 300)], c.status)
			}
			if p := r.problem(t); p.Type != problemType(c.typ) || p.Status != c.status {
				t.Fatalf("problem = %+v, want type %s", p, c.typ)
			}
		})
	}

	t.Run("1000 waiters from one key", func(t *testing.T) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		statuses := map[int]int{}
		client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: 1000}}
		for i := 0; i < 1000; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest("POST", s.URL+"/v1/locks/team-a:job/leases", bytes.NewReader([]byte(`{"wait_ms":1500}`)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+s.teamA)
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
					t.Error("429 without Retry-After")
				}
				mu.Lock()
				statuses[resp.StatusCode]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		t.Logf("statuses: %v", statuses)
		if statuses[429] < 900 || statuses[409]+statuses[429] != 1000 {
			t.Fatalf("1000 waiters from one key with a limit of 20: %v", statuses)
		}
	})

	if after := snapshot(t, s.rdb); after != before {
		t.Fatalf("hostile requests changed Redis:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if strings.Contains(s.Logs(), `"status":5`) {
		t.Fatal("a hostile request was answered with a 5xx")
	}

	// Secrets never reach the logs: keys, the release secret, signatures.
	logs := s.Logs()
	for what, secret := range map[string]string{
		"team-a key": s.teamA, "team-b key": s.teamB, "reader key": s.reader, "ops key": s.ops,
		"release secret": releaseSecret, "a release signature": sig, "a tampered signature": tamperedSig,
	} {
		if strings.Contains(logs, secret) {
			t.Errorf("the logs contain %s", what)
		}
	}
}

// TestSecurity_cross_principal: principal A can never renew, release or see
// B's leases, and the same owner string under two principals gives two
// independent locks.
func TestSecurity_cross_principal(t *testing.T) {
	s := startSecured(t)
	lb := s.acquire(t, s.teamB, "shared:db", `{"owner":"worker-1","ttl_ms":60000}`)

	// Same owner string, other principal: not reentrant, the lock is held.
	r := s.do(t, call{method: "POST", path: "/v1/locks/shared:db/leases", key: s.teamA, body: `{"owner":"worker-1"}`})
	if r.Status != 409 {
		t.Fatalf("team-a with team-b's owner string: %d %s", r.Status, r.Body)
	}
	// The state shows no lease id, to anyone.
	for _, key := range []string{s.teamA, s.teamB, s.reader} {
		st := s.do(t, call{method: "GET", path: "/v1/locks/shared:db", key: key})
		if st.Status != 200 || strings.Contains(string(st.Body), lb.LeaseID) {
			t.Fatalf("inspect shows the lease id: %d %s", st.Status, st.Body)
		}
	}
	for _, c := range []call{
		{method: "POST", path: "/v1/locks/shared:db/leases/" + lb.LeaseID + "/renew", key: s.teamA},
		{method: "DELETE", path: "/v1/locks/shared:db/leases/" + lb.LeaseID, key: s.teamA},
	} {
		if r := s.do(t, c); r.Status != 403 {
			t.Fatalf("%s by team-a: %d %s", c.method, r.Status, r.Body)
		}
	}
	// Its own principal may; then the same owner under team-a is a new,
	// independent lease.
	if r := s.do(t, call{method: "DELETE", path: "/v1/locks/shared:db/leases/" + lb.LeaseID, key: s.teamB}); r.Status != 200 {
		t.Fatalf("release by team-b: %d %s", r.Status, r.Body)
	}
	la := s.acquire(t, s.teamA, "shared:db", `{"owner":"worker-1","ttl_ms":60000}`)
	if la.LeaseID == lb.LeaseID || la.FencingToken <= lb.FencingToken {
		t.Fatalf("team-a's lease %+v after team-b's %+v", la, lb)
	}
	r = s.do(t, call{method: "POST", path: "/v1/locks/shared:db/leases", key: s.teamB, body: `{"owner":"worker-1"}`})
	if r.Status != 409 {
		t.Fatalf("team-b re-entering team-a's lock: %d %s", r.Status, r.Body)
	}
	// An admin may release anyone's lease; listing shows what it may see.
	if r := s.do(t, call{method: "GET", path: "/v1/locks?prefix=shared:", key: s.ops}); r.Status != 200 || !strings.Contains(string(r.Body), "shared:db") {
		t.Fatalf("admin list: %d %s", r.Status, r.Body)
	}
	if r := s.do(t, call{method: "DELETE", path: "/v1/locks/shared:db/leases/" + la.LeaseID, key: s.ops}); r.Status != 200 {
		t.Fatalf("admin release: %d %s", r.Status, r.Body)
	}
	// /healthz and /readyz stay open.
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := s.do(t, call{method: "GET", path: p}); r.Status != 200 {
			t.Fatalf("%s without a key: %d", p, r.Status)
		}
	}
}

// TestSecurity_webhook_release: a webhook-style POST to release_url, with a
// payload and no Authorization header, frees the lock and wakes a waiter.
func TestSecurity_webhook_release(t *testing.T) {
	s := startSecured(t)
	held := s.acquire(t, s.teamA, "team-a:deploy", `{"ttl_ms":300000}`)
	got := make(chan response, 1)
	go func() {
		got <- s.do(t, call{method: "POST", path: "/v1/locks/team-a:deploy/leases", key: s.teamA, body: `{"wait_ms":30000}`})
	}()
	time.Sleep(200 * time.Millisecond) // let the waiter park; a grant before the release would fail below
	start := time.Now()
	r := s.do(t, call{method: "POST", path: held.releaseURL, body: `{"ref":"refs/heads/main","action":"completed","workflow_run":{"conclusion":"success"}}`})
	if r.Status != 200 || !strings.Contains(string(r.Body), `"released":true`) {
		t.Fatalf("webhook release: %d %s", r.Status, r.Body)
	}
	select {
	case w := <-got:
		if w.Status != 201 {
			t.Fatalf("waiter: %d %s", w.Status, w.Body)
		}
		t.Logf("waiter granted %v after the webhook release", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the webhook release")
	}
}

// TestSecurity_rate_limit: a caller over its request rate gets 429 with
// Retry-After, and another caller is not affected.
func TestSecurity_rate_limit(t *testing.T) {
	s := startSecured(t, "--rate-limit", "2", "--rate-burst", "5")
	limited := 0
	for i := 0; i < 10; i++ {
		r := s.do(t, call{method: "GET", path: "/v1/locks/team-a:x", key: s.teamA})
		if r.Status == 429 {
			limited++
			if r.Header.Get("Retry-After") == "" || r.problem(t).Type != problemType("rate-limited") {
				t.Fatalf("429 = %s, Retry-After %q", r.Body, r.Header.Get("Retry-After"))
			}
		}
	}
	if limited < 4 {
		t.Fatalf("%d of 10 quick requests were limited with a burst of 5", limited)
	}
	if r := s.do(t, call{method: "GET", path: "/v1/locks/team-b:x", key: s.teamB}); r.Status != 200 {
		t.Fatalf("another principal was limited: %d", r.Status)
	}
}
