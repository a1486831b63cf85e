// Package upgrade runs the previous release of lockapi beside this one on
// one Redis, as a rolling deploy does, following docs/UPGRADING.md. It is a
// package of its own so that go test runs it beside the long packages:
// most of its time is the build of the previous release.
package upgrade

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// previous names the release before this one: its tag, and the commit the
// tag points at, for a checkout that fetched no tags.
const previous, previousCommit = "v0.1.0", "285a604"

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// unavailable skips the test, or fails it when CI is set: CI must run it.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// buildPrevious builds the previous release's lockapi from its tag (or
// commit) into dir, with the module cache this build uses.
func buildPrevious(t *testing.T, dir string) (string, error) {
	rev := ""
	for _, r := range []string{previous, previousCommit} {
		if exec.Command("git", "-C", repoRoot, "rev-parse", "--verify", "-q", r+"^{commit}").Run() == nil {
			rev = r
			break
		}
	}
	if rev == "" {
		unavailable(t, "the git history has neither %s nor %s (a shallow checkout?): fetch it to run the mixed-version test", previous, previousCommit)
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	archive := exec.Command("git", "-C", repoRoot, "archive", rev)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	untar.Stdin = pipe
	var stderr, tarErr bytes.Buffer
	archive.Stderr, untar.Stderr = &stderr, &tarErr
	if err := untar.Start(); err != nil {
		return "", err
	}
	if err := archive.Run(); err != nil {
		return "", fmt.Errorf("git archive %s: %v: %s", rev, err, stderr.String())
	}
	if err := untar.Wait(); err != nil {
		return "", fmt.Errorf("tar: %v: %s", err, tarErr.String())
	}
	bin := filepath.Join(dir, "lockapi-"+previous)
	return bin, goBuild(src, bin, "./cmd/lockapi")
}

// goBuild builds pkg in dir into bin, without the race detector: these are
// the binaries an operator runs. -trimpath keeps the directory out of what
// the build cache keys on, so that the next run's build of the previous
// release, in another temporary directory, is a cache hit.
func goBuild(dir, bin, pkg string, flags ...string) error {
	cmd := exec.Command("go", append(append([]string{"build", "-trimpath", "-o", bin}, flags...), pkg)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build %s in %s: %v\n%s", pkg, dir, err, out)
	}
	return nil
}

// binaries builds both releases at once.
func binaries(t *testing.T) (old, cur string) {
	if _, err := exec.LookPath("git"); err != nil {
		unavailable(t, "no git: the mixed-version test builds %s from the history", previous)
	}
	dir := t.TempDir()
	cur = filepath.Join(dir, "lockapi-current")
	done := make(chan error, 1)
	go func() { done <- goBuild(".", cur, "../../cmd/lockapi", "-ldflags=-X main.version=v0.0.0-upgrade-test") }()
	old, err := buildPrevious(t, dir)
	if err2 := <-done; err == nil {
		err = err2
	}
	if err != nil {
		t.Fatal(err)
	}
	return old, cur
}

// instance is one running lockapi process.
type instance struct {
	name, url string
	cmd       *exec.Cmd
	logs      *syncBuffer
	exited    chan struct{}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// start runs bin serve on a free loopback port with env, and waits until
// it answers /healthz.
func start(t *testing.T, name, bin string, env ...string) *instance {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	in := &instance{name: name, url: "http://" + addr, logs: &syncBuffer{}, exited: make(chan struct{})}
	in.cmd = exec.Command(bin, "serve")
	in.cmd.Env = append(os.Environ(), append([]string{"LOCKAPI_ADDR=" + addr, "LOCKAPI_LOG_LEVEL=info", "LOCKAPI_LOG_FORMAT=json", "LOCKAPI_WEBHOOKS_ALLOW_PRIVATE=true"}, env...)...)
	in.cmd.Stdout, in.cmd.Stderr = in.logs, in.logs
	if err := in.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = in.cmd.Wait(); close(in.exited) }()
	t.Cleanup(func() { in.stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(in.url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return in
			}
		}
		select {
		case <-in.exited:
			t.Fatalf("%s exited at start:\n%s", name, in.logs)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer /healthz:\n%s", name, in.logs)
		}
	}
}

// stop ends the process with SIGTERM (SIGKILL after 15 s).
func (in *instance) stop(t *testing.T) {
	select {
	case <-in.exited:
		return
	default:
	}
	_ = in.cmd.Process.Signal(os.Interrupt)
	select {
	case <-in.exited:
	case <-time.After(15 * time.Second):
		_ = in.cmd.Process.Kill()
		<-in.exited
		t.Errorf("%s did not stop within 15 s of SIGTERM", in.name)
	}
}

// call sends a JSON request and decodes a JSON answer into out (when not
// nil); it returns the status.
func (in *instance) call(t *testing.T, method, path string, body, out any) int {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, in.url+path, r)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s on %s: %v", method, path, in.name, err) // not Fatal: workers call it
		return 0
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s on %s: %v: %s", method, path, in.name, err, data)
		}
	}
	if resp.StatusCode >= 300 {
		t.Logf("%s %s on %s: %d %s", method, path, in.name, resp.StatusCode, data)
	}
	return resp.StatusCode
}

// seen is one event as a reader got it.
type seen struct{ typ, lock string }

// reader reads an instance's event stream, from after ("" for what comes
// next), recording events by id and comments.
type reader struct {
	mu       sync.Mutex
	events   map[string]seen
	comments []string
	changed  chan struct{}
}

func read(t *testing.T, in *instance, after string) *reader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	path := "/v1/events"
	if after != "" {
		path += "?after=" + after
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", in.url+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/events on %s: %v %v", in.name, err, resp)
	}
	r := &reader{events: map[string]seen{}, changed: make(chan struct{}, 1)}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var id, typ string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				id = line[4:]
			case strings.HasPrefix(line, "event: "):
				typ = line[7:]
			case strings.HasPrefix(line, "data: "):
				var e struct{ Lock string }
				_ = json.Unmarshal([]byte(line[6:]), &e)
				r.note(func() { r.events[id] = seen{typ, e.Lock} })
			case strings.HasPrefix(line, ": ") && line != ": keep-alive":
				r.note(func() { r.comments = append(r.comments, line[2:]) })
			}
		}
	}()
	return r
}

func (r *reader) note(f func()) {
	r.mu.Lock()
	f()
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// waitFor waits up to 20 s until ok holds of what r read.
func (r *reader) waitFor(ok func() bool) bool {
	deadline := time.After(20 * time.Second)
	for {
		r.mu.Lock()
		done := ok()
		r.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-r.changed:
		case <-deadline:
			return false
		}
	}
}

// logEvents reads the log in Redis after after, as either release writes
// it, leaving out lockapi's own locks (lockapi.*), which no reader is sent.
func logEvents(t *testing.T, rdb *goredis.Client, after string) map[string]seen {
	t.Helper()
	start := "-"
	if after != "" {
		start = "(" + after
	}
	msgs, err := rdb.XRange(context.Background(), "lockapi:events", start, "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]seen{}
	for _, m := range msgs {
		typ, _ := m.Values["t"].(string)
		name, _ := m.Values["l"].(string)
		if e, ok := m.Values["e"].(string); ok {
			f := strings.Split(e, "\n")
			typ, name = f[0], f[1]
		}
		if !strings.HasPrefix(name, "lockapi.") {
			out[m.ID] = seen{typ, name}
		}
	}
	return out
}

func lastID(t *testing.T, rdb *goredis.Client) string {
	msgs, err := rdb.XRevRangeN(context.Background(), "lockapi:events", "+", "-", 1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) == 0 {
		return ""
	}
	return msgs[0].ID
}

// receiver records the event ids each webhook (by path) was sent.
type receiver struct {
	mu  sync.Mutex
	got map[string]map[string]bool
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var e struct{ ID string }
	_ = json.NewDecoder(r.Body).Decode(&e)
	rc.mu.Lock()
	if rc.got[r.URL.Path] == nil {
		rc.got[r.URL.Path] = map[string]bool{}
	}
	rc.got[r.URL.Path][e.ID] = true
	rc.mu.Unlock()
}

func (rc *receiver) missing(path string, want map[string]seen) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for id := range want {
		if !rc.got[path][id] {
			n++
		}
	}
	return n
}

type lease struct {
	Lock    string `json:"lock"`
	LeaseID string `json:"lease_id"`
	Token   uint64 `json:"fencing_token"`
}

// TestMixedVersions runs the previous release and this one on one Redis
// as docs/UPGRADING.md says: this one with LOCKAPI_EVENTS_BY_FIELD=true
// while the previous one runs, then alone without it. Locks granted,
// renewed and released across them never overlap; every event made on
// either side reaches the event streams of both and the webhooks,
// whichever instance delivers them; sessions and webhooks made on one side
// are used on the other.
func TestMixedVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release")
	}
	began := time.Now()
	oldBin, curBin := binaries(t)
	t.Logf("built both releases in %v", time.Since(began).Round(time.Millisecond))
	if out, err := exec.Command(curBin, "version").Output(); err != nil || !strings.HasPrefix(string(out), "lockapi v0.0.0-upgrade-test\n") {
		t.Errorf("lockapi version of a build with -X main.version: %v %q", err, out)
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redisURL := "LOCKAPI_REDIS_URL=" + srv.URL

	// The fleet runs the previous release; the deploy starts this one
	// beside it, with the layout the previous one reads.
	old := start(t, "old", oldBin, redisURL)
	cur := start(t, "new", curBin, redisURL, "LOCKAPI_EVENTS_BY_FIELD=true")
	both := []*instance{old, cur}

	rc := &receiver{got: map[string]map[string]bool{}}
	hooks := httptest.NewServer(rc)
	t.Cleanup(hooks.Close)
	readers := []*reader{read(t, old, ""), read(t, cur, "")}
	var hookIDs []string
	for i, in := range both {
		var w struct{ ID string }
		if st := in.call(t, "POST", "/v1/webhooks", map[string]any{"url": hooks.URL + "/" + in.name, "prefix": "up:"}, &w); st != http.StatusCreated {
			t.Fatalf("create a webhook on %s: %d", in.name, st)
		}
		hookIDs = append(hookIDs, w.ID)
		// Read on the other side.
		if st := both[1-i].call(t, "GET", "/v1/webhooks/"+w.ID, nil, nil); st != http.StatusOK {
			t.Errorf("the webhook made on %s, read on %s: %d", in.name, both[1-i].name, st)
		}
	}
	// A webhook starts at the newest event; this one's log starts here.
	from := lastID(t, rdb)

	crossLocks(t, both)
	crossSessions(t, both)

	want := logEvents(t, rdb, from)
	if len(want) < 60*3 {
		t.Fatalf("the log holds %d events of the test, want at least 180", len(want))
	}
	// Every lease was released long before its TTL: an expired event is
	// one a release of one version left for the other to misread.
	for id, e := range want {
		if e.typ == "expired" {
			t.Errorf("event %s: %s %s, when every lease was released", id, e.typ, e.lock)
		}
	}
	for i, r := range readers {
		var lost, wrong []string
		ok := r.waitFor(func() bool {
			lost, wrong = lost[:0], wrong[:0]
			for id, e := range want {
				switch got, ok := r.events[id]; {
				case !ok:
					lost = append(lost, id)
				case got != e:
					wrong = append(wrong, fmt.Sprintf("%s: %v, want %v", id, got, e))
				}
			}
			return len(lost) == 0
		})
		if !ok || len(wrong) > 0 {
			t.Errorf("the event stream of %s: %d of %d events lost, %d read wrong, the first: %q", both[i].name, len(lost), len(want), len(wrong), wrong[:min(5, len(wrong))])
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, in := range both {
		for rc.missing("/"+in.name, want) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if n := rc.missing("/"+in.name, want); n > 0 {
			t.Errorf("the webhook made on %s: %d of %d events not delivered", in.name, n, len(want))
		}
	}

	// The deploy ends: the previous release is gone, and this one runs
	// without the switch. It reads the whole log, both layouts.
	old.stop(t)
	cur.stop(t)
	cur = start(t, "new-2", curBin, redisURL)
	all := read(t, cur, from)
	if !all.waitFor(func() bool {
		for id, e := range want {
			if all.events[id] != e {
				return false
			}
		}
		return true
	}) {
		t.Error("after the deploy, a stream from before it does not read every event")
	}
	for _, id := range hookIDs {
		if st := cur.call(t, "DELETE", "/v1/webhooks/"+id, nil, nil); st != http.StatusNoContent && st != http.StatusOK {
			t.Errorf("delete webhook %s: %d", id, st)
		}
	}
	unknownLayouts(t, cur, rdb)
	t.Logf("TestMixedVersions took %v", time.Since(began).Round(time.Millisecond))
}

// crossLocks: four workers, two on each instance, take one lock in turn 15
// times each: each acquires (waiting) on its instance, renews and releases
// on the other. No two ever hold it at once, and the fencing tokens rise.
func crossLocks(t *testing.T, both []*instance) {
	var inside, overlaps, grants atomic.Int32
	var mu sync.Mutex
	var lastToken uint64
	var wg sync.WaitGroup
	for w := range 4 {
		here, there := both[w%2], both[1-w%2]
		wg.Go(func() {
			for range 15 {
				var l lease
				body := map[string]any{"owner": fmt.Sprintf("w%d", w), "ttl_ms": 20000, "wait_ms": 20000}
				if st := here.call(t, "POST", "/v1/locks/up:cross/leases", body, &l); st != http.StatusCreated && st != http.StatusOK {
					t.Errorf("acquire on %s: %d", here.name, st)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				grants.Add(1)
				mu.Lock()
				if l.Token <= lastToken {
					t.Errorf("token %d after %d", l.Token, lastToken)
				}
				lastToken = l.Token
				mu.Unlock()
				path := "/v1/locks/up:cross/leases/" + l.LeaseID
				if st := there.call(t, "POST", path+"/renew", map[string]any{"ttl_ms": 20000}, nil); st != http.StatusOK {
					t.Errorf("renew on %s: %d", there.name, st)
				}
				inside.Add(-1)
				if st := there.call(t, "DELETE", path, nil, nil); st >= 300 {
					t.Errorf("release on %s: %d", there.name, st)
				}
			}
		})
	}
	wg.Wait()
	if grants.Load() != 60 || overlaps.Load() != 0 {
		t.Errorf("%d grants (want 60) with %d overlaps (want 0)", grants.Load(), overlaps.Load())
	}
}

// crossSessions: a session made on each side binds a lease taken on the
// other, is renewed and read on the other, and its end there frees the
// lock.
func crossSessions(t *testing.T, both []*instance) {
	for i, here := range both {
		there := both[1-i]
		var s struct {
			ID string `json:"session_id"`
		}
		if st := here.call(t, "POST", "/v1/sessions", map[string]any{"owner": "s", "ttl_ms": 20000}, &s); st != http.StatusCreated {
			t.Fatalf("create a session on %s: %d", here.name, st)
		}
		name := "up:session-" + here.name
		var l lease
		if st := there.call(t, "POST", "/v1/locks/"+name+"/leases", map[string]any{"owner": "s", "session": s.ID}, &l); st != http.StatusCreated && st != http.StatusOK {
			t.Fatalf("a lease bound to %s's session, on %s: %d", here.name, there.name, st)
		}
		if st := there.call(t, "POST", "/v1/sessions/"+s.ID+"/renew", map[string]any{"ttl_ms": 20000}, nil); st != http.StatusOK {
			t.Errorf("renew %s's session on %s: %d", here.name, there.name, st)
		}
		var got struct {
			Leases []struct {
				Lock string `json:"lock"`
			} `json:"leases"`
		}
		if st := here.call(t, "GET", "/v1/sessions/"+s.ID, nil, &got); st != http.StatusOK || len(got.Leases) != 1 || got.Leases[0].Lock != name {
			t.Errorf("the session on %s: %d %+v, want its lease on %s", here.name, st, got, name)
		}
		if st := there.call(t, "DELETE", "/v1/sessions/"+s.ID, nil, nil); st >= 300 {
			t.Errorf("end %s's session on %s: %d", here.name, there.name, st)
		}
		var next lease
		if st := here.call(t, "POST", "/v1/locks/"+name+"/leases", map[string]any{"owner": "after", "wait_ms": 10000}, &next); st != http.StatusCreated && st != http.StatusOK {
			t.Errorf("%s after its session ended: %d", name, st)
		} else {
			here.call(t, "DELETE", "/v1/locks/"+name+"/leases/"+next.LeaseID, nil, nil)
		}
	}
}

// unknownLease: a lock whose lock hash has a layout this release does not
// know is neither granted to another, renewed nor shown: 503 each, and the
// lock hash stays as it was.
func unknownLease(t *testing.T, cur *instance, rdb *goredis.Client) {
	ctx := context.Background()
	var l lease
	if st := cur.call(t, "POST", "/v1/locks/up:later/leases", map[string]any{"owner": "a", "ttl_ms": 20000}, &l); st != http.StatusCreated {
		t.Fatalf("acquire up:later: %d", st)
	}
	key := "lockapi:{up:later}:lock"
	rdb.HSet(ctx, key, "v", "2")
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/locks/up:later/leases", map[string]any{"owner": "b", "ttl_ms": 20000}},
		{"POST", "/v1/locks/up:later/leases/" + l.LeaseID + "/renew", map[string]any{"ttl_ms": 20000}},
		{"GET", "/v1/locks/up:later", nil},
	} {
		if st := cur.call(t, c.method, c.path, c.body, nil); st != http.StatusServiceUnavailable {
			t.Errorf("%s %s on a lock of an unknown layout: %d, want 503", c.method, c.path, st)
		}
	}
	if owner, _ := rdb.HGet(ctx, key, "owner").Result(); owner != "a" {
		t.Errorf("the lock of an unknown layout is held by %q, want a", owner)
	}
}

// unknownLayouts: records of a layout this release does not know (a later
// one's) are counted by kind, logged once per kind, and an event stream
// says so in their place (docs/UPGRADING.md).
func unknownLayouts(t *testing.T, cur *instance, rdb *goredis.Client) {
	ctx := context.Background()
	r := read(t, cur, "")
	var ids []string
	for range 2 {
		id, err := rdb.XAdd(ctx, &goredis.XAddArgs{Stream: "lockapi:events", Values: []any{"v", "3", "e", "a later layout"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if !r.waitFor(func() bool { return len(r.comments) >= 2 }) {
		t.Fatalf("the stream said nothing of the unknown layouts: %q", r.comments)
	}
	r.mu.Lock()
	comments := append([]string(nil), r.comments[:2]...)
	r.mu.Unlock()
	for i, c := range comments {
		if !strings.HasPrefix(c, "unknown-layout "+ids[i]+" v=3: ") {
			t.Errorf("comment %q, want unknown-layout %s v=3: ...", c, ids[i])
		}
	}
	var s struct {
		ID string `json:"session_id"`
	}
	if st := cur.call(t, "POST", "/v1/sessions", map[string]any{"owner": "s", "ttl_ms": 20000}, &s); st != http.StatusCreated {
		t.Fatalf("create a session: %d", st)
	}
	rdb.HSet(ctx, "lockapi:{s:"+s.ID+"}:session", "v", "2")
	if st := cur.call(t, "GET", "/v1/sessions/"+s.ID, nil, nil); st != http.StatusServiceUnavailable {
		t.Errorf("a session of an unknown layout: %d, want 503", st)
	}
	rdb.HSet(ctx, "lockapi:webhooks:subs", "later", `{"v":2,"id":"later"}`)
	if st := cur.call(t, "GET", "/v1/webhooks/later", nil, nil); st != http.StatusServiceUnavailable {
		t.Errorf("a webhook of an unknown layout: %d, want 503", st)
	}
	unknownLease(t, cur, rdb)
	resp, err := http.Get(cur.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The counter counts reads, not records: a reader that reads an entry
	// again (a webhook catching up, the stream) counts it again. At least
	// the injected records: 2 events, 1 session, 1 webhook.
	for kind, least := range map[string]int{"events": 2, "sessions": 1, "webhooks": 1, "leases": 3} {
		m := regexp.MustCompile(`(?m)^lockapi_unknown_layout_total\{kind="` + kind + `"\} ([0-9]+)$`).FindSubmatch(metrics)
		if n := 0; m == nil {
			t.Errorf("/metrics has no lockapi_unknown_layout_total{kind=%q}", kind)
		} else if n, _ = strconv.Atoi(string(m[1])); n < least {
			t.Errorf("lockapi_unknown_layout_total{kind=%q} = %d, want at least %d", kind, n, least)
		}
	}
	logs := cur.logs.String()
	for _, kind := range []string{"events", "sessions", "webhooks", "leases"} {
		if n := strings.Count(logs, `"kind":"`+kind+`","layout"`); n != 1 {
			t.Errorf("%d log lines for unknown %s layouts, want 1:\n%s", n, kind, logs)
		}
	}
}
