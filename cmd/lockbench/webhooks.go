package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Targets of the webhooks mode (issue 21 §3, measured there with 100).
const (
	targetHooks          = 1000
	targetHookAcquireMax = time.Second
)

// hookReceiver is the webhooks mode's receiver: one local server behind
// every webhook URL (/hook/<n>), answering 204 at once and counting
// distinct (webhook, event) deliveries.
type hookReceiver struct {
	url  string
	srv  *http.Server
	want int64

	mu       sync.Mutex
	seen     map[string]struct{}
	requests int64
	last     time.Time
	all      chan struct{} // closed when want distinct deliveries arrived
}

func startHookReceiver(want int64) (*hookReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &hookReceiver{url: "http://" + ln.Addr().String(), want: want, seen: map[string]struct{}{}, all: make(chan struct{})}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *hookReceiver) serve(w http.ResponseWriter, req *http.Request) {
	_, _ = io.Copy(io.Discard, req.Body)
	w.WriteHeader(http.StatusNoContent)
	key := req.URL.Path + " " + req.Header.Get("webhook-id")
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	if _, dup := r.seen[key]; dup || !strings.HasPrefix(req.URL.Path, "/hook/") {
		return
	}
	r.seen[key] = struct{}{}
	r.last = time.Now()
	if int64(len(r.seen)) == r.want {
		close(r.all)
	}
}

func (r *hookReceiver) counts() (distinct, requests int64, last time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return int64(len(r.seen)), r.requests, r.last
}

// runWebhooks is the webhooks mode: -hooks webhooks (one local receiver,
// a URL each) on a server started with LOCKAPI_WEBHOOKS_ALLOW_PRIVATE=true.
// It measures what the webhooks cost Redis while nothing happens, then
// -jobs acquire+release pairs (two events each, delivered to every
// webhook): deliveries/s, Redis commands per delivery, and the slowest of
// the acquires a prober makes meanwhile. It deletes its webhooks at the end.
func runWebhooks(ctx context.Context, cfg *config, log io.Writer) (*result, error) {
	hooks, jobs := cfg.hooks, cfg.jobs
	want := int64(hooks) * int64(2*jobs)
	rdb, err := openRedis(ctx, cfg.redisURL, 1)
	if err != nil {
		return nil, fmt.Errorf("webhooks needs the server's Redis (-redis): %w", err)
	}
	defer rdb.Close()
	cl, err := cfg.connect(ctx, 16)
	if err != nil {
		return nil, err
	}
	defer cl.close()
	recv, err := startHookReceiver(want)
	if err != nil {
		return nil, err
	}
	defer recv.srv.Close()
	pid := cfg.serverPID
	if pid == 0 {
		pid = serverPID(cfg.server)
	}

	// Create the webhooks, as an admin would, a few at a time.
	prefix := cfg.prefix + "hook:"
	fmt.Fprintf(log, "lockbench: creating %d webhooks to %s\n", hooks, recv.url)
	ids := make([]string, hooks)
	createStart := time.Now()
	var slowestCreate atomic.Int64
	var createErr firstError
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 8 {
		wg.Go(func() {
			s := cl.newSession(nil)
			for {
				n := int(next.Add(1) - 1)
				if n >= hooks || ctx.Err() != nil {
					return
				}
				body, _ := json.Marshal(map[string]any{"url": fmt.Sprintf("%s/hook/%d", recv.url, n), "prefix": prefix})
				t0 := time.Now()
				rep, err := s.do(ctx, http.MethodPost, "/v1/webhooks", strings.NewReader(string(body)), int64(len(body)))
				storeMax(&slowestCreate, int64(time.Since(t0)))
				if err == nil && rep.status != http.StatusCreated {
					err = statusError("POST /v1/webhooks", rep)
				}
				if err != nil {
					createErr.set(err)
					return
				}
				var created struct{ ID string }
				_ = json.Unmarshal(rep.body, &created)
				ids[n] = created.ID
			}
		})
	}
	wg.Wait()
	created := time.Since(createStart)
	defer deleteHooks(cl, ids, log)
	if err := createErr.get(); err != nil {
		return nil, err
	}

	// Every worker takes its lease and reads its cursor; then the standing
	// cost of the webhooks is what Redis runs while nothing happens.
	sleep(ctx, 3*time.Second)
	fmt.Fprintf(log, "lockbench: %d webhooks created in %v; measuring them idle for %v\n", hooks, created.Round(time.Millisecond), cfg.window)
	idle, err := measureWindow(ctx, ctx, rdb, pid, cfg.window, nil)
	if err != nil {
		return nil, err
	}
	_, idleCmds, idleBreakdown := commandDiff(idle.calls0, idle.calls1)
	idleRate := float64(idleCmds) / idle.took.Seconds()

	// Deliver: jobs pairs while a prober acquires every 100 ms.
	fmt.Fprintf(log, "lockbench: %d events to %d webhooks: %d deliveries\n", 2*jobs, hooks, want)
	meter := &cpuMeter{pid: pid, rdb: rdb}
	cpu0 := meter.sample(ctx)
	calls0, err := commandCalls(ctx, rdb)
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	pctx, stopProbe := context.WithCancel(ctx)
	probe := &hookProbe{}
	probed := probe.run(pctx, cl, cfg.prefix+"hookprobe")
	defer func() { stopProbe(); <-probed }()
	start := time.Now()
	s := cl.newSession(acquireBody("lockbench-hooks", cfg.ttl, 0, lockKind{}))
	for i := range jobs {
		name := fmt.Sprintf("%sjob-%d", prefix, i)
		rep, err := s.acquire(ctx, name)
		if err == nil && rep.status != http.StatusCreated {
			err = statusError("acquire "+name, rep)
		}
		if err == nil {
			rep, err = s.release(ctx, name, leaseIDOf(rep))
		}
		if err != nil {
			return nil, err
		}
	}
	select {
	case <-recv.all:
	case <-time.After(parkTimeout):
	case <-ctx.Done():
	}
	delivered, requests, last := recv.counts()
	took := last.Sub(start)
	calls1, err := commandCalls(ctx, rdb)
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	cpu1 := meter.sample(ctx)
	clients, _, _ := clientCounts(ctx, rdb)
	if delivered < want {
		return nil, fmt.Errorf("only %d of %d deliveries arrived within %v", delivered, want, parkTimeout)
	}
	window := time.Since(start)
	_, cmds, breakdown := commandDiff(calls0, calls1)
	net := float64(cmds) - idleRate*window.Seconds()

	r := cfg.newResult()
	r.setInt("hooks", int64(hooks))
	r.setInt("events", int64(2*jobs))
	r.setInt("deliveries", delivered)
	r.setInt("requests", requests)
	r.setFloat("create_s", created.Seconds(), 2)
	r.setMs("create_max", time.Duration(slowestCreate.Load()))
	r.setFloat("idle_cmds_per_s", idleRate, 1)
	r.set("idle_cmds", idleBreakdown)
	r.setFloat("deliver_s", took.Seconds(), 2)
	r.setFloat("deliveries_per_s", float64(delivered)/took.Seconds(), 0)
	r.setFloat("redis_cmds_per_delivery", float64(cmds)/float64(delivered), 2)
	r.setFloat("redis_cmds_per_delivery_net_of_idle", net/float64(delivered), 2)
	r.set("redis_cmds", breakdown)
	r.setInt("redis_clients", int64(clients))
	r.setInt("probe_acquires", probe.n.Load())
	r.setMs("probe_acquire_max", time.Duration(probe.slowest.Load()))
	r.setInt("probe_503", probe.unavailable.Load())
	addCPU(r, cpu0, cpu1)
	slowest := time.Duration(max(probe.slowest.Load(), slowestCreate.Load()))
	r.targets = append(r.targets, target{What: "acquires and webhook creations while webhooks deliver", Want: "≤ 1 s, no 503 (1,000 webhooks)",
		Got:  fmt.Sprintf("slowest %v, %d answered 503", slowest.Round(time.Millisecond), probe.unavailable.Load()),
		Pass: slowest <= targetHookAcquireMax && probe.unavailable.Load() == 0, NA: hooks != targetHooks})
	return r, nil
}

// hookProbe acquires and releases a lock every 100 ms, timing the acquires.
type hookProbe struct {
	n, slowest, unavailable atomic.Int64
}

func (p *hookProbe) run(ctx context.Context, cl *client, name string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s := cl.newSession(acquireBody("lockbench-probe", 10*time.Second, 0, lockKind{}))
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for ctx.Err() == nil {
			t0 := time.Now()
			rep, err := s.acquire(ctx, name)
			if err == nil {
				p.n.Add(1)
				storeMax(&p.slowest, int64(time.Since(t0)))
				if rep.status == http.StatusServiceUnavailable {
					p.unavailable.Add(1)
				}
				if rep.status == http.StatusCreated {
					_, _ = s.release(ctx, name, leaseIDOf(rep))
				}
			}
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
	}()
	return done
}

// deleteHooks deletes the webhooks the run created.
func deleteHooks(cl *client, ids []string, log io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := cl.newSession(nil)
	failed := 0
	for _, id := range ids {
		if id == "" {
			continue
		}
		if rep, err := s.do(ctx, http.MethodDelete, "/v1/webhooks/"+id, nil, 0); err != nil || rep.status != http.StatusNoContent {
			failed++
		}
	}
	if failed > 0 {
		fmt.Fprintf(log, "lockbench: %d webhooks could not be deleted\n", failed)
	}
}

// hooksFlagHelp documents -hooks for the usage text.
const hooksFlagHelp = "webhooks: number of webhooks to create"
