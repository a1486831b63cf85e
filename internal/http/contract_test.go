package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/metrics"
	"github.com/lockapi/lockapi/internal/store/memory"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/apitest"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// TestContract is the property-based contract test. For every operation of
// openapi.yaml it draws requests from the spec alone (apitest.Gen), valid
// ones and ones that break one rule of one input, sends them to the real
// handler on the memory store and on Redis, and holds every answer to the
// spec: its status, content type, body and headers as documented (the
// apitest client validates each with kin-openapi's openapi3filter), an
// invalid request refused with 400 naming the input it broke, a valid one
// never refused as invalid, a lock named in the path answered as that
// name, and a HEAD of every GET answered as the GET.
//
// Path parameters go percent-encoded at random, and many invalid ones
// spell a character as its percent-encoding, which decoded once holds a
// "%": a server that decoded a path twice would take them as valid.
//
// LOCKAPI_CONTRACT_SEED repeats a run (each failure names its seed);
// LOCKAPI_CONTRACT_N sets the draws of each kind per operation.
func TestContract(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("LOCKAPI_CONTRACT_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("LOCKAPI_CONTRACT_SEED: %v", err)
		}
	}
	n := 16
	if s := os.Getenv("LOCKAPI_CONTRACT_N"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatalf("LOCKAPI_CONTRACT_N: %v", err)
		}
	}
	t.Logf("LOCKAPI_CONTRACT_SEED=%d", seed)

	t.Run("Memory", func(t *testing.T) {
		mem := memory.New()
		t.Cleanup(func() { _ = mem.Close() })
		checkContract(t, mem, seed, n)
	})
	t.Run("Redis", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a Redis")
		}
		rs := redistest.Start(t)
		rdb, err := redisstore.NewClient(redisstore.ClientConfig{URL: rs.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rdb.Close() })
		st, err := redisstore.New(rdb, redisstore.Options{Prefix: "contract:", Events: true, Batch: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		checkContract(t, st, seed, n)
	})
}

// checkContract runs the contract test against a server on store.
func checkContract(t *testing.T, store lock.Store, seed uint64, n int) {
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)
	srv := mustOpenServer(t, store, lockhttp.Config{
		// The spec's own ceiling, so that every ttl_ms it allows is taken,
		// and short waits, so that drawn waits end soon.
		MaxTTL:   lockhttp.MaxTTLCeiling,
		MaxWait:  20 * time.Millisecond,
		Metrics:  metrics.New(),
		Webhooks: mustRunWebhooks(t, store, nil),
		Logger:   zerolog.Nop(),
	}, withDashboard) // as lockapi serve runs it: GET / is the dashboard's

	gen, err := apitest.NewGen(seed)
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(seed, 1))
	c := &contractRun{url: srv.URL(), receiver: receiver.URL, rnd: rnd, seed: seed}
	for _, op := range gen.Operations() {
		t.Run(op.ID, func(t *testing.T) {
			valid := apitest.NewClient(t, c.url, apitest.ValidateRequests())
			invalid := apitest.NewClient(t, c.url)
			c.seen = map[string]int{}
			for range n {
				d := gen.Valid(op)
				c.unsaid(d)
				c.checkValid(t, valid, d)

				d = gen.Valid(op)
				c.unsaid(d)
				if gen.Break(d, unchecked(op.ID)) {
					c.checkInvalid(t, invalid, d)
					c.seen[fmt.Sprintf("%s %s: %s", d.Broken.In, d.Broken.Name, d.Broken.Rule)]++
				}
			}
			t.Logf("answered and broken: %v", c.seen)
		})
	}
}

type contractRun struct {
	url, receiver string
	rnd           *rand.Rand
	seed          uint64
	seen          map[string]int // of an operation: the statuses of valid drafts, the breaches
}

// unsaid adjusts a valid draft for the rules the spec states in prose
// only, which its schemas cannot.
func (c *contractRun) unsaid(d *apitest.Draft) {
	body, _ := d.Body.(map[string]any)
	switch d.Op.ID {
	case "acquireLease":
		// A semaphore's permits are not shared.
		if body["mode"] == "shared" {
			delete(body, "limit")
		}
		// At most the server's min_replicas, 0 here.
		if _, ok := body["min_replicas"]; ok {
			body["min_replicas"] = 0
		}
	case "getEvents":
		// lock or prefix, not both.
		if _, ok := d.Query["lock"]; ok {
			delete(d.Query, "prefix")
		}
	case "listLocks":
		// A cursor is what a page's next_cursor gave, nothing else.
		delete(d.Query, "cursor")
	case "createWebhook":
		// A receiver that answers, on an address the server may reach.
		body["url"] = c.receiver + "/" + strconv.Itoa(c.rnd.IntN(1000))
	}
}

// unchecked names the inputs the server knowingly does not check: the
// body of a signed release, which a webhook sends and lockapi ignores.
func unchecked(op string) func(in, name string) bool {
	return func(in, name string) bool {
		return op == "releaseBySignedURL" && in == "body"
	}
}

// send sends a draft; an event stream is read no further than its
// headers, through a plain client (the apitest client reads whole bodies).
func (c *contractRun) send(t *testing.T, client *http.Client, d *apitest.Draft, method string) (status int, body []byte, ok bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), promptly)
	defer cancel()
	req, err := d.Request(ctx, c.url, c.rnd)
	if err != nil {
		t.Errorf("seed %d: encode %+v: %v", c.seed, d, err)
		return 0, nil, false
	}
	req.Method = method
	stream := d.Op.ID == "getEvents" && method == http.MethodGet
	if stream {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("seed %d: %s %s (%v): %v", c.seed, method, req.URL.RequestURI(), d.Broken, err)
		return 0, nil, false
	}
	defer resp.Body.Close()
	if stream && resp.StatusCode == http.StatusOK {
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("seed %d: GET %s: 200 with Content-Type %q", c.seed, req.URL.RequestURI(), ct)
		}
		return resp.StatusCode, nil, true
	}
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("seed %d: %s %s: read: %v", c.seed, method, req.URL.RequestURI(), err)
	}
	return resp.StatusCode, body, true
}

// checkValid sends a valid draft: never refused as invalid, a lock named in
// the path answered as that name, and a HEAD of a GET answered as the GET.
func (c *contractRun) checkValid(t *testing.T, client *http.Client, d *apitest.Draft) {
	t.Helper()
	status, body, ok := c.send(t, client, d, d.Op.Method)
	if !ok {
		return
	}
	c.seen[strconv.Itoa(status)]++
	if status == http.StatusBadRequest {
		t.Errorf("seed %d: a valid %s was refused: %s\ndraft: path %v query %v header %v body %v", c.seed, d.Op.ID, body, d.Path, d.Query, d.Header, d.Body)
		return
	}
	if name, ok := d.Path["name"]; ok && status < 300 && len(body) > 0 {
		var v struct {
			Lock *string `json:"lock"`
		}
		if json.Unmarshal(body, &v) == nil && v.Lock != nil && *v.Lock != name {
			t.Errorf("seed %d: %s of lock %q answered for lock %q", c.seed, d.Op.ID, name, *v.Lock)
		}
	}
	if d.Op.Method == http.MethodGet {
		// The same answer, unless one of them was turned away for now.
		head, _, ok := c.send(t, client, d, http.MethodHead)
		if ok && head != status && !transient(head) && !transient(status) {
			t.Errorf("seed %d: HEAD %s answered %d, GET %d", c.seed, d.Op.Path, head, status)
		}
	}
	if d.Op.ID == "createWebhook" && status == http.StatusCreated {
		c.deleteWebhook(t, client, body)
	}
}

// transient reports whether status turns a request away for now.
func transient(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
}

// deleteWebhook deletes the webhook just created, whose answer is body: a
// webhook's delivery worker holds a Redis connection, and the test would
// otherwise run out of them.
func (c *contractRun) deleteWebhook(t *testing.T, client *http.Client, body []byte) {
	t.Helper()
	var w lockhttp.Webhook
	if err := json.Unmarshal(body, &w); err != nil {
		t.Errorf("seed %d: a new webhook: %v", c.seed, err)
		return
	}
	req, _ := http.NewRequest(http.MethodDelete, c.url+"/v1/webhooks/"+w.ID, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("seed %d: delete webhook %s: %v", c.seed, w.ID, err)
		return
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("seed %d: delete webhook %s: %d", c.seed, w.ID, resp.StatusCode)
	}
}

// checkInvalid sends a draft that breaks one rule: 400 invalid-request,
// naming the input it broke (any, for the body as a whole).
func (c *contractRun) checkInvalid(t *testing.T, client *http.Client, d *apitest.Draft) {
	t.Helper()
	status, body, ok := c.send(t, client, d, d.Op.Method)
	if !ok {
		return
	}
	var p struct {
		Type   string `json:"type"`
		Errors []struct {
			Field string `json:"field"`
		} `json:"errors"`
	}
	_ = json.Unmarshal(body, &p)
	if status != http.StatusBadRequest || p.Type != lockhttp.ProblemTypeBase+"invalid-request" {
		t.Errorf("seed %d: %s breaking %v answered %d, want 400 invalid-request: %s", c.seed, d.Op.ID, d.Broken, status, body)
		return
	}
	if d.Broken.Name == "" {
		return
	}
	named := slices.ContainsFunc(p.Errors, func(e struct {
		Field string `json:"field"`
	}) bool {
		return e.Field == d.Broken.Name || strings.HasPrefix(e.Field, d.Broken.Name+"[")
	})
	if !named {
		t.Errorf("seed %d: %s breaking %v answered 400 without naming %s: %s", c.seed, d.Op.ID, d.Broken, d.Broken.Name, body)
	}
}
