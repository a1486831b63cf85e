package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/lockapi/lockapi/internal/testkit/linearize"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// Linearizability: concurrent clients drive the real binary over HTTP and
// record every operation (call time, return time, request, answer); the
// history is then checked against the models of internal/testkit/linearize
// with porcupine. Leases take a 60 s TTL, far beyond a run, so that expiry
// never enters the model.
//
// Sizes: LOCKAPI_LINEARIZE_OPS sets the operations of each random history
// (default linearizeOps, sized so that the whole test takes about a minute
// under -race on two cores; the full size is 4000).
// LOCKAPI_LINEARIZE_SEED runs one seed instead of the fixed ones. A failing
// run logs its seed and the path of porcupine's HTML visualization.

const (
	linearizeTTL     = 60000
	linearizeClients = 8
	linearizeNames   = 4
	// linearizeOwners owners shared by the clients, so that reentrant
	// acquires of one owner run concurrently.
	linearizeOwners = 3
	linearizeOps    = 600
	// linearizeCheckTimeout bounds porcupine's search.
	linearizeCheckTimeout = time.Minute
)

// redlockPromise is how exactly redlock's answers must describe the lock:
// what docs/TOPOLOGIES.md ("What redlock's answers promise") says. Its
// hold counts are exact while every master answers within its deadline, so
// the redlock runs give the masters a deadline no call reaches here.
var redlockPromise = linearize.Redlock

// seeds are the fixed seeds of the random histories; LOCKAPI_LINEARIZE_SEED
// picks one instead.
func seeds(t *testing.T, fixed ...uint64) []uint64 {
	if s := os.Getenv("LOCKAPI_LINEARIZE_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("LOCKAPI_LINEARIZE_SEED=%q: %v", s, err)
		}
		return []uint64{n}
	}
	return fixed
}

func linearizeSize(t *testing.T) int {
	if s := os.Getenv("LOCKAPI_LINEARIZE_OPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("LOCKAPI_LINEARIZE_OPS=%q: want a positive number", s)
		}
		return n
	}
	return linearizeOps
}

// workload is one kind's random operations.
type workload string

const (
	kindLock      workload = "lock"      // exclusive, reentrant
	kindShared    workload = "shared"    // read-write
	kindSemaphore workload = "semaphore" // limit 2
	kindMulti     workload = "multi"     // multi-locks beside single acquires
)

type linBackend struct {
	name    string
	start   func(t *testing.T) []string // the lockapi environment
	promise linearize.Promise
	kinds   []workload
	fair    bool
}

func linBackends() []linBackend {
	return []linBackend{
		{name: "memory", start: func(t *testing.T) []string { return nil }, promise: linearize.Strict,
			kinds: []workload{kindLock, kindShared, kindSemaphore, kindMulti}, fair: true},
		{name: "single", start: func(t *testing.T) []string {
			return []string{"LOCKAPI_REDIS_URL=" + redistest.Start(t).URL}
		}, promise: linearize.Strict, kinds: []workload{kindLock, kindShared, kindSemaphore, kindMulti}, fair: true},
		{name: "cluster", start: func(t *testing.T) []string {
			return []string{"LOCKAPI_REDIS_MODE=cluster", "LOCKAPI_REDIS_URL=" + redistest.StartCluster(t).URL()}
		}, promise: linearize.Strict, kinds: []workload{kindLock, kindShared, kindSemaphore, kindMulti}, fair: true},
		{name: "redlock", start: func(t *testing.T) []string {
			return []string{"LOCKAPI_REDIS_MODE=redlock", "LOCKAPI_REDIS_URL=" + redistest.StartRedlock(t, 3).URL(),
				"LOCKAPI_REDLOCK_TIMEOUT=2s"}
		}, promise: redlockPromise, kinds: []workload{kindLock, kindShared}},
	}
}

// TestLinearizability checks random histories of every kind on every
// backend. Run one with -run 'Linearizability/single/multi'.
func TestLinearizability(t *testing.T) {
	for _, b := range linBackends() {
		t.Run(b.name, func(t *testing.T) {
			s := startServer(t, b.start(t), "--log-level", "warn")
			c := newLinClient(s)
			for _, kind := range b.kinds {
				t.Run(string(kind), func(t *testing.T) {
					for _, seed := range seeds(t, 1, 2) {
						h := linearize.NewHistory()
						runWorkload(t, c, h, kind, seed, linearizeSize(t))
						checkHistory(t, h, b.promise, seed)
					}
				})
			}
			if b.fair {
				t.Run("fair", func(t *testing.T) {
					h := linearize.NewHistory()
					runFair(t, c, h, "lin-fair", 6, 3)
					checkHistory(t, h, b.promise, 0)
				})
			}
		})
	}
}

// TestLinearizability_refused_multi_keeps_hold_counts: an owner's
// reentrant acquires and releases of a run beside its multi-locks that a
// name held by another owner refuses: a refused multi-lock must give back
// exactly the holds it took (docs/LOCK_KINDS.md, "Multi-locks").
func TestLinearizability_refused_multi_keeps_hold_counts(t *testing.T) {
	for _, b := range linBackends()[:2] { // memory and single Redis
		t.Run(b.name, func(t *testing.T) {
			s := startServer(t, b.start(t), "--log-level", "warn")
			c := newLinClient(s)
			h := linearize.NewHistory()
			a, z := "refused-multi:a", "refused-multi:z"
			if _, ok, _ := c.acquire(t, h, 0, linearize.Input{Lock: z, Owner: "other"}); !ok {
				t.Fatal("the blocking lease was not granted")
			}
			held, ok, _ := c.acquire(t, h, 0, linearize.Input{Lock: a, Owner: "m"})
			if !ok {
				t.Fatal("m's first hold was not granted")
			}
			var wg sync.WaitGroup
			for client := 1; client <= 4; client++ {
				wg.Go(func() {
					for range 40 {
						if client%2 == 0 {
							c.multi(t, h, client, []string{a, z}, "m")
							continue
						}
						if l, ok, _ := c.acquire(t, h, client, linearize.Input{Lock: a, Owner: "m"}); ok {
							c.release(t, h, client, l, false)
						}
					}
				})
			}
			wg.Wait()
			c.release(t, h, 0, held, false)
			checkHistory(t, h, linearize.Strict, 0)
		})
	}
}

// TestLinearizability_redlock_concurrent_reentry: one owner's concurrent
// reentrant acquires on redlock must each report their own hold count,
// under redlockPromise.
func TestLinearizability_redlock_concurrent_reentry(t *testing.T) {
	b := linBackends()[3]
	s := startServer(t, b.start(t), "--log-level", "warn")
	c := newLinClient(s)
	h := linearize.NewHistory()
	first, ok, _ := c.acquire(t, h, 0, linearize.Input{Lock: "reentry", Owner: "o"})
	if !ok {
		t.Fatal("the first hold was not granted")
	}
	var wg sync.WaitGroup
	for client := 1; client <= linearizeClients; client++ {
		wg.Go(func() {
			for range 10 {
				if l, ok, _ := c.acquire(t, h, client, linearize.Input{Lock: "reentry", Owner: "o"}); ok {
					c.release(t, h, client, l, false)
				}
				c.acquire(t, h, client, linearize.Input{Lock: "reentry", Owner: fmt.Sprintf("other-%d", client)})
			}
		})
	}
	wg.Wait()
	c.release(t, h, 0, first, false)
	checkHistory(t, h, b.promise, 0)
}

// checkHistory checks h under p. Porcupine's Unknown, a search that ran
// out of linearizeCheckTimeout, fails the test as Illegal does: a history
// too large to check proves nothing.
func checkHistory(t *testing.T, h *linearize.History, p linearize.Promise, seed uint64) {
	t.Helper()
	ops := h.Operations()
	res := linearize.Check(p, ops, linearizeCheckTimeout)
	rerun := fmt.Sprintf("rerun with LOCKAPI_LINEARIZE_SEED=%d", seed)
	switch res.Result {
	case porcupine.Ok:
		t.Logf("seed %d: %d operations, linearizable (checked in %v)", seed, len(ops), res.Took.Round(time.Millisecond))
	case porcupine.Unknown:
		t.Errorf("seed %d: porcupine could not decide within %v whether %d operations are linearizable (Unknown), "+
			"which fails as Illegal would: the search of %v ran out of time. Make the history smaller "+
			"(fewer operations of unknown outcome per name); %s; the history: %s",
			seed, linearizeCheckTimeout, len(ops), res.Undecided, rerun, linearize.Dump(ops))
	default:
		t.Errorf("seed %d: %d operations are %s under %+v: the history of %v is not linearizable (%s); porcupine's visualization: %s; the history: %s",
			seed, len(ops), res.Result, p, res.Illegal, rerun, res.Visualization, linearize.Dump(ops))
	}
}

// heldLease is one hold a client took: the lock and its lease.
type heldLease struct{ lock, id string }

// runWorkload runs linearizeClients clients, each doing its share of ops
// random operations of kind on linearizeNames names, and releases what
// they still hold at the end.
func runWorkload(t *testing.T, c *linClient, h *linearize.History, kind workload, seed uint64, ops int) {
	t.Helper()
	names := linNames(kind, seed)
	var wg sync.WaitGroup
	for client := range linearizeClients {
		wg.Go(func() {
			w := newLinWorker(client, kind, names, seed)
			for range ops / linearizeClients {
				w.step(t, c, h)
			}
			w.releaseAll(t, c, h)
		})
	}
	wg.Wait()
}

func linNames(kind workload, seed uint64) []string {
	names := make([]string, linearizeNames)
	for i := range names {
		names[i] = fmt.Sprintf("lin-%s-%d-%d", kind, seed, i)
	}
	return names
}

// linWorker is one client of a random workload: its owner, its random
// choices and the holds it took.
type linWorker struct {
	client int
	owner  string
	kind   workload
	names  []string
	rng    *rand.Rand
	held   []heldLease
}

func newLinWorker(client int, kind workload, names []string, seed uint64) *linWorker {
	return &linWorker{client: client, owner: fmt.Sprintf("o%d", client%linearizeOwners), kind: kind, names: names,
		rng: rand.New(rand.NewPCG(seed, uint64(client)))}
}

// step does one random operation: it releases a hold it took, or tries to
// acquire. It reports what the answer told; a hold whose release went
// unanswered is kept, to be released again.
func (w *linWorker) step(t *testing.T, c *linClient, h *linearize.History) reply {
	rng := w.rng
	if len(w.held) > 0 && (len(w.held) >= 3 || rng.IntN(100) < 45) {
		i := rng.IntN(len(w.held))
		r := c.release(t, h, w.client, w.held[i], rng.IntN(10) == 0)
		if r.answered {
			w.held = slices.Delete(w.held, i, i+1)
		}
		return r
	}
	in := linearize.Input{Lock: w.names[rng.IntN(len(w.names))], Owner: w.owner}
	switch w.kind {
	case kindShared:
		in.Shared = rng.IntN(2) == 0
	case kindSemaphore:
		in.Limit = 2
	case kindMulti:
		if rng.IntN(2) == 0 {
			n := 2 + rng.IntN(2)
			locks := slices.Clone(w.names)
			rng.Shuffle(len(locks), func(i, j int) { locks[i], locks[j] = locks[j], locks[i] })
			w.held = append(w.held, c.multi(t, h, w.client, locks[:n], w.owner)...)
			return reply{answered: true}
		}
	}
	l, ok, r := c.acquire(t, h, w.client, in)
	if ok {
		w.held = append(w.held, l)
	}
	return r
}

// releaseAll releases every hold left, once each.
func (w *linWorker) releaseAll(t *testing.T, c *linClient, h *linearize.History) {
	for _, l := range w.held {
		c.release(t, h, w.client, l, false)
	}
	w.held = nil
}

// runFair runs rounds of a fair lock's hand-offs on name: a holder holds
// it, waiters fair waiters queue behind it one after another (each seen in
// the queue before the next starts), and the holder releases; each waiter
// releases soon after its grant. A Join operation records, beside each
// waiter's acquire, the moment its place was seen: the model then grants
// the lock in the order of the queue.
func runFair(t *testing.T, c *linClient, h *linearize.History, name string, rounds, waiters int) {
	t.Helper()
	for round := range rounds {
		holder, ok, _ := c.acquire(t, h, 0, linearize.Input{Lock: name, Owner: "holder"})
		if !ok {
			t.Fatalf("round %d: the holder was not granted", round)
		}
		var wg sync.WaitGroup
		for w := 1; w <= waiters; w++ {
			in := linearize.Input{Lock: name, Owner: fmt.Sprintf("w%d", w), Fair: true, Tag: fmt.Sprintf("r%dw%d", round, w)}
			call := h.Now()
			wg.Go(func() {
				if l, ok, _ := c.acquireAt(t, h, w, in, call, 20000); ok {
					time.Sleep(time.Millisecond)
					c.release(t, h, w, l, false)
				}
			})
			c.waitQueue(t, name, w)
			join := in
			join.Kind = linearize.Join
			h.Add(w, join, call, linearize.Output{}, h.Now())
		}
		c.release(t, h, 0, holder, false)
		wg.Wait()
	}
}

// linClient talks to one lockapi over plain HTTP: the responses are
// checked by the model, not against openapi.yaml, which keeps the clients
// fast enough under -race.
type linClient struct {
	base string
	c    *http.Client
	seq  chan int // the next tag's number
}

func newLinClient(s *server) *linClient {
	c := &linClient{base: s.URL, c: &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 2 * linearizeClients},
	}, seq: make(chan int, 1)}
	c.seq <- 0
	return c
}

func (c *linClient) nextTag() string {
	n := <-c.seq
	c.seq <- n + 1
	return fmt.Sprintf("m%d", n)
}

// answer is one HTTP answer; status 0 when none came.
type answer struct {
	status int
	body   []byte
	// refused: lockapi refused the connection (it is down), so the
	// request never reached it and is not an operation.
	refused bool
	// retryAfter is the answer's Retry-After: lockapi's 503 asks the
	// client to wait that long before it tries again.
	retryAfter time.Duration
}

// reply is what an answer tells the client that sent it, beyond the
// model's Output.
type reply struct {
	// answered: the answer said what happened (no 5xx, no transport error).
	answered bool
	// unavailableFor: how long a 5xx's Retry-After asks the client to wait
	// before it tries again (lockapi's 503 says 1 s); 0 for none. A 409's
	// Retry-After, when to look at the lock again, is not counted: a
	// client that has other locks to ask for need not wait.
	unavailableFor time.Duration
}

func (a answer) reply() reply {
	r := reply{answered: !a.refused && a.status != 0 && a.status < 500}
	if a.status >= 500 {
		r.unavailableFor = a.retryAfter
	}
	return r
}

func (c *linClient) send(t *testing.T, method, path string, body any) answer {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, c.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.c.Do(req)
	if err != nil {
		var op *net.OpError
		return answer{refused: errors.As(err, &op) && op.Op == "dial"}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}
	}
	a := answer{status: resp.StatusCode, body: b}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		a.retryAfter = time.Duration(secs) * time.Second
	}
	return a
}

// output makes the model's Output of an answer. A transport error or a 5xx
// is Unknown; any other status the model does not know fails the test.
func (a answer) output(t *testing.T) linearize.Output {
	switch {
	case a.status == 0 || a.status >= 500:
		return linearize.Output{Unknown: true}
	case a.status == 200 || a.status == 201:
		var v struct {
			LeaseID      string `json:"lease_id"`
			FencingToken uint64 `json:"fencing_token"`
			HoldCount    int    `json:"hold_count"`
			Released     bool   `json:"released"`
		}
		if err := json.Unmarshal(a.body, &v); err != nil {
			t.Errorf("decode %s: %v", a.body, err)
		}
		return linearize.Output{Status: a.status, LeaseID: v.LeaseID, Token: v.FencingToken, HoldCount: v.HoldCount, Released: v.Released}
	case a.status == 409 || a.status == 410:
		var p Problem
		if err := json.Unmarshal(a.body, &p); err != nil {
			t.Errorf("decode %s: %v", a.body, err)
		}
		out := linearize.Output{Status: a.status, Problem: p.Type[strings.LastIndex(p.Type, "/")+1:]}
		if p.Holder != nil {
			out.HolderOwner, out.HolderToken = p.Holder.Owner, p.Holder.FencingToken
		}
		return out
	}
	t.Errorf("unexpected answer %d %s", a.status, a.body)
	return linearize.Output{Unknown: true}
}

func acquireBody(in linearize.Input, waitMs int) map[string]any {
	body := map[string]any{"owner": in.Owner, "ttl_ms": linearizeTTL, "wait_ms": waitMs}
	if in.Shared {
		body["mode"] = "shared"
	}
	if in.Limit > 0 {
		body["limit"] = in.Limit
	}
	if in.Fair {
		body["fair"] = true
	}
	return body
}

// acquire tries once to acquire in.Lock and records it; ok says whether it
// was granted.
func (c *linClient) acquire(t *testing.T, h *linearize.History, client int, in linearize.Input) (l heldLease, ok bool, r reply) {
	return c.acquireAt(t, h, client, in, h.Now(), 0)
}

func (c *linClient) acquireAt(t *testing.T, h *linearize.History, client int, in linearize.Input, call int64, waitMs int) (l heldLease, ok bool, r reply) {
	in.Kind = linearize.Acquire
	if in.Tag == "" {
		in.Tag = c.nextTag()
	}
	a := c.send(t, "POST", "/v1/locks/"+in.Lock+"/leases", acquireBody(in, waitMs))
	if a.refused {
		return heldLease{}, false, a.reply()
	}
	out := a.output(t)
	if a.status >= 500 {
		// lockapi undoes what an acquire it answered 5xx may have
		// granted (README, "A grant whose answer lockapi could not
		// deliver is undone"), in the background: the undo may come
		// before the answer or long after it. An acquire in flight when
		// lockapi died is not undone.
		out.Abandoned = true
		h.AddFailed(client, in, call, out, h.Now())
		return heldLease{}, false, a.reply()
	}
	h.Add(client, in, call, out, h.Now())
	return heldLease{in.Lock, out.LeaseID}, !out.Unknown && out.Status < 300, a.reply()
}

// release drops one hold of l (all with all) and records it.
func (c *linClient) release(t *testing.T, h *linearize.History, client int, l heldLease, all bool) reply {
	return c.releaseIn(t, h, client, l, all, "")
}

// releaseIn is release, recorded in the linearize group group.
func (c *linClient) releaseIn(t *testing.T, h *linearize.History, client int, l heldLease, all bool, group string) reply {
	in := linearize.Input{Kind: linearize.Release, Lock: l.lock, LeaseID: l.id, All: all, Group: group}
	path := "/v1/locks/" + l.lock + "/leases/" + l.id
	if all {
		path += "?all=true"
	}
	call := h.Now()
	a := c.send(t, "DELETE", path, nil)
	if a.refused {
		return a.reply()
	}
	out := a.output(t)
	if a.status >= 500 {
		h.AddFailed(client, in, call, out, h.Now())
	} else {
		h.Add(client, in, call, out, h.Now())
	}
	return a.reply()
}

// multi tries once to acquire every name of locks for owner, and records
// one operation per name: an Acquire for each name granted; when a name
// refuses it, a Take and a GiveBack for each name it took before (byte
// order) and the refused Acquire of that name.
func (c *linClient) multi(t *testing.T, h *linearize.History, client int, locks []string, owner string) []heldLease {
	call := h.Now()
	a := c.send(t, "POST", "/v1/leases", map[string]any{"locks": locks, "owner": owner, "ttl_ms": linearizeTTL})
	ret := h.Now()
	tag := c.nextTag()
	in := func(kind linearize.Kind, name string) linearize.Input {
		return linearize.Input{Kind: kind, Lock: name, Owner: owner, Tag: tag + ":" + name}
	}
	switch {
	case a.status == 201:
		var v struct {
			Leases []struct {
				LeaseID      string `json:"lease_id"`
				FencingToken uint64 `json:"fencing_token"`
				HoldCount    int    `json:"hold_count"`
			} `json:"leases"`
		}
		if err := json.Unmarshal(a.body, &v); err != nil || len(v.Leases) != len(locks) {
			t.Errorf("multi-lock answered %s (%v), want %d leases", a.body, err, len(locks))
			return nil
		}
		var held []heldLease
		for i, l := range v.Leases {
			status := 201 // a fresh lease; one re-entered has two holds or more
			if l.HoldCount > 1 {
				status = 200
			}
			out := linearize.Output{Status: status, LeaseID: l.LeaseID, Token: l.FencingToken, HoldCount: l.HoldCount}
			h.Add(client, in(linearize.Acquire, locks[i]), call, out, ret)
			held = append(held, heldLease{locks[i], l.LeaseID})
		}
		return held
	case a.status == 409:
		var p struct {
			Lock string `json:"lock"`
		}
		if err := json.Unmarshal(a.body, &p); err != nil || !slices.Contains(locks, p.Lock) {
			t.Errorf("multi-lock refused with %s: no lock of %v named", a.body, locks)
			return nil
		}
		for _, name := range locks {
			if name < p.Lock {
				h.Add(client, in(linearize.Take, name), call, linearize.Output{}, ret)
				h.Add(client, in(linearize.GiveBack, name), call, linearize.Output{}, ret)
			}
		}
		h.Add(client, in(linearize.Acquire, p.Lock), call, a.output(t), ret)
		return nil
	}
	out := a.output(t)
	for _, name := range locks {
		h.Add(client, in(linearize.Acquire, name), call, out, ret)
	}
	return nil
}

// waitQueue waits until name's queue holds n waiters.
func (c *linClient) waitQueue(t *testing.T, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := c.send(t, "GET", "/v1/locks/"+name, nil)
		var st struct {
			QueueLength int `json:"queue_length"`
		}
		if a.status == 200 && json.Unmarshal(a.body, &st) == nil && st.QueueLength == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue of %s: %s, want %d waiters", name, a.body, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
