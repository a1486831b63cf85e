package tests

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/client"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// sessionHolderEnv, set to a server's URL, makes the test binary a client
// that holds a session with locks of every kind until it is killed.
const sessionHolderEnv = "LOCKAPI_E2E_SESSION_HOLDER"

// holderTTL is the session TTL of the client process the test kills.
const holderTTL = 2 * time.Second

// heldByHolder are the locks the holder takes, one of each kind.
var heldByHolder = []string{"kill:exclusive", "kill:shared", "kill:permit", "kill:fair", "kill:multi-a", "kill:multi-b"}

// holdSession is the client process: it takes a session and, bound to it,
// an exclusive lock, a shared lease, a semaphore permit, a fair lock and a
// multi-lock, says "ready" on stdout, and waits to be killed.
func holdSession(url string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	ctx := context.Background()
	c, err := client.New(url)
	if err != nil {
		return fail(err)
	}
	s, err := c.NewSession(ctx, client.SessionOptions{TTL: holderTTL})
	if err != nil {
		return fail(err)
	}
	for _, take := range []struct {
		name string
		opts client.AcquireOptions
	}{
		{"kill:exclusive", client.AcquireOptions{}},
		{"kill:shared", client.AcquireOptions{Shared: true}},
		{"kill:permit", client.AcquireOptions{Limit: 2}},
		{"kill:fair", client.AcquireOptions{Fair: true, Wait: time.Second}},
	} {
		if _, err := s.Acquire(ctx, take.name, take.opts); err != nil {
			return fail(err)
		}
	}
	if _, err := s.AcquireAll(ctx, []string{"kill:multi-a", "kill:multi-b"}, client.AcquireOptions{}); err != nil {
		return fail(err)
	}
	fmt.Println("ready")
	select {} // until SIGKILL
}

// A client process holding a session with locks of every kind is killed
// -9: nobody releases anything, and all its locks are free within the
// session's TTL and a second.
func TestE2E_session_of_a_killed_client_frees_every_lock(t *testing.T) {
	s := startServer(t, []string{"LOCKAPI_REDIS_URL="})
	a := newAPI(t, s)

	holder := exec.Command(os.Args[0], "-test.run=^$")
	holder.Env = append(os.Environ(), sessionHolderEnv+"="+s.URL)
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	holder.Stderr = &stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- strings.TrimSpace(line) == "ready"
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("the holder did not get its locks: %s", stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the holder is not ready: %s", stderr.String())
	}

	// Two TTLs: the session's one watchdog keeps every lock.
	time.Sleep(2 * holderTTL)
	for _, name := range heldByHolder {
		if st := a.state(name); !st.Held {
			t.Fatalf("%s is free while the holder lives: %+v", name, st)
		}
	}

	if err := holder.Process.Kill(); err != nil { // SIGKILL: no release, no goodbye
		t.Fatal(err)
	}
	killed := time.Now()
	_ = holder.Wait()
	deadline := killed.Add(holderTTL + time.Second)
	for _, name := range heldByHolder {
		for a.state(name).Held {
			if time.Now().After(deadline) {
				t.Fatalf("%s is still held %v after the holder was killed (session TTL %v)", name, time.Since(killed), holderTTL)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("every lock free %v after the kill (session TTL %v)", time.Since(killed).Round(time.Millisecond), holderTTL)
}

// A lockapi instance is killed -9 while a session it made lives, with
// leases of several kinds bound to it: another instance on the same Redis,
// which never heard of the session, ends it on time. Every lock is free
// within a second of the session's expiry, each expiry is in the event
// log naming the session, and the session answers 410 from then on.
func TestE2E_session_outlives_a_killed_instance(t *testing.T) {
	env := []string{"LOCKAPI_REDIS_URL=" + redistest.Start(t).URL}
	first, second := startServer(t, env), startServer(t, env)
	a, b := newAPI(t, first), newAPI(t, second)

	r := a.must("POST", "/v1/sessions", map[string]any{"ttl_ms": holderTTL.Milliseconds(), "owner": "worker"})
	if r.Status != 201 {
		t.Fatalf("create session: %d %s", r.Status, r.Body)
	}
	var sess struct {
		ID string `json:"session_id"`
	}
	r.decode(t, &sess)
	names := []string{"inst:exclusive", "inst:shared", "inst:permit"}
	bodies := []map[string]any{{}, {"mode": "shared"}, {"limit": 2}}
	for i, name := range names {
		bodies[i]["session"], bodies[i]["owner"] = sess.ID, "worker"
		a.mustAcquire(name, bodies[i], 201)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := openStream(t, ctx, b.base, "", "", "")
	// The last renewal, then the instance that made the session dies.
	r = a.must("POST", "/v1/sessions/"+sess.ID+"/renew", map[string]any{})
	var renewed struct {
		ExpiresAt time.Time `json:"expires_at"`
	}
	r.decode(t, &renewed)
	first.killNow()

	deadline := renewed.ExpiresAt.Add(time.Second)
	for _, name := range names {
		for b.state(name).Held {
			if time.Now().After(deadline) {
				t.Fatalf("%s is still held %v after its session's expiry", name, time.Since(renewed.ExpiresAt))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("every lock free %v after the session's expiry", time.Since(renewed.ExpiresAt).Round(time.Millisecond))
	// Nobody acquired since: the second instance's sweeper ended them, and
	// recorded each expiry naming the session.
	expired := map[string]bool{}
	for len(expired) < len(names) {
		if e := next(t, events); e.Type == "expired" && e.Session == sess.ID {
			expired[e.Lock] = true
		}
	}
	t.Logf("every expiry recorded %v after the session's expiry", time.Since(renewed.ExpiresAt).Round(time.Millisecond))
	if r := b.must("GET", "/v1/sessions/"+sess.ID, nil); r.Status != 410 {
		t.Fatalf("the expired session answers %d %s, want 410", r.Status, r.Body)
	}
}
