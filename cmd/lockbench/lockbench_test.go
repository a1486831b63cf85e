package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/metrics"
	"github.com/lockapi/lockapi/internal/store/memory"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// TestMain runs lockbench itself when the bare and cost modes start this
// test binary as their bare front.
func TestMain(m *testing.M) {
	if os.Getenv(bareFrontEnv) != "" {
		main()
	}
	os.Exit(m.Run())
}

// openServer runs lockapi in-process on a fresh Redis, the way
// cmd/lockapi wires it, and returns its URL and the Redis URL.
func openServer(t *testing.T, m *metrics.Metrics) (serverURL, redisURL string) {
	t.Helper()
	rs := redistest.Start(t)
	st, err := redisstore.New(rs.Client(t), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return serve(t, st, m), rs.URL
}

// serve runs lockapi in-process on st and returns its URL.
func serve(t *testing.T, st lock.Store, m *metrics.Metrics) string {
	t.Helper()
	signer, err := auth.NewReleaseSigner(auth.RandomSecret())
	if err != nil {
		t.Fatal(err)
	}
	srv := lockhttp.NewServer(st, lockhttp.Config{MaxWaiters: 1000, MaxWaitersPerCaller: 1000, Metrics: m, Release: signer})
	if err := srv.Open("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Errorf("close server: %v", err)
		}
	})
	return srv.URL()
}

// runTool runs lockbench in-process and returns its result line, parsed.
func runTool(t *testing.T, args ...string) map[string]string {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if code := run(ctx, args, &out, &errOut); code != 0 {
		t.Fatalf("lockbench %s: exit %d\nstderr:\n%s", strings.Join(args, " "), code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "lockbench mode=") {
		t.Fatalf("want one result line on stdout, got %q", out.String())
	}
	t.Logf("%s", lines[0])
	return parseLine(lines[0])
}

// positive fails unless every key holds a number above 0.
func positive(t *testing.T, res map[string]string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		v, err := strconv.ParseFloat(res[k], 64)
		if err != nil || v <= 0 {
			t.Errorf("%s=%q, want a number > 0", k, res[k])
		}
	}
}

// TestSmoke runs every mode very briefly against an in-process server.
func TestSmoke(t *testing.T) {
	server, redisURL := openServer(t, nil)
	doc := filepath.Join(t.TempDir(), "docs", "BENCHMARKS.md")
	load := []string{"-server", server, "-redis", redisURL, "-c", "4", "-k", "50", "-warmup", "100ms", "-duration", "300ms"}

	t.Run("throughput", func(t *testing.T) {
		res := runTool(t, append([]string{"throughput", "-prefix", "smoke-t:", "-record", doc}, load...)...)
		positive(t, res, "pairs", "pairs_per_s", "acq_p50_ms", "acq_p99_ms", "acq_p999_ms", "tool_cpu_s")
		if res["errors"] != "0" {
			t.Errorf("errors=%s", res["errors"])
		}
	})
	t.Run("against", func(t *testing.T) {
		other, _ := openServer(t, nil)
		res := runTool(t, append([]string{"throughput", "-prefix", "smoke-v:", "-against", other, "-rounds", "1", "-label", "metrics", "-record", doc}, load...)...)
		positive(t, res, "pairs_per_s", "against_pairs_per_s")
		if res["rounds_pairs_per_s"] != res["pairs_per_s"] || res["cost"] == "" {
			t.Errorf("rounds_pairs_per_s=%s pairs_per_s=%s cost=%s: one round is its own median, and the cost is reported",
				res["rounds_pairs_per_s"], res["pairs_per_s"], res["cost"])
		}
	})
	t.Run("baseline", func(t *testing.T) {
		res := runTool(t, append([]string{"-mode", "baseline", "-prefix", "smoke-b:"}, load...)...)
		positive(t, res, "pairs", "pairs_per_s", "acq_p99_ms")
	})
	t.Run("all", func(t *testing.T) {
		res := runTool(t, append([]string{"both", "-prefix", "smoke-a:", "-record", doc}, load...)...)
		positive(t, res, "pairs", "pairs_per_s", "baseline_pairs_per_s", "ratio")
	})
	t.Run("rate", func(t *testing.T) {
		res := runTool(t, append([]string{"rate", "-rate", "50%", "-prefix", "smoke-r:", "-record", doc}, load...)...)
		positive(t, res, "peak_pairs_per_s", "target_per_s", "pairs", "pairs_per_s", "acq_p99_ms")
	})
	t.Run("handoff", func(t *testing.T) {
		res := runTool(t, "handoff", "-server", server, "-prefix", "smoke-h:", "-waiters", "3", "-n", "20", "-settle", "200ms", "-record", doc)
		positive(t, res, "handoffs", "handoff_p50_ms", "handoff_p99_ms")
		if res["handoffs"] != "20" {
			t.Errorf("handoffs=%s, want 20", res["handoffs"])
		}
	})
	t.Run("kinds", func(t *testing.T) {
		for _, kind := range []string{"shared", "semaphore", "fair", "multi"} {
			res := runTool(t, append([]string{"throughput", "-kind", kind, "-prefix", "smoke-k" + kind + ":"}, load...)...)
			positive(t, res, "pairs", "pairs_per_s")
			if res["errors"] != "0" || res["kind"] != kind {
				t.Errorf("-kind %s: errors=%s kind=%s", kind, res["errors"], res["kind"])
			}
			res = runTool(t, "handoff", "-kind", kind, "-server", server, "-prefix", "smoke-hk"+kind+":", "-waiters", "3", "-n", "12", "-settle", "200ms")
			positive(t, res, "handoffs", "handoff_p50_ms")
		}
	})
	t.Run("redisson", func(t *testing.T) {
		res := runTool(t, append([]string{"redisson", "-prefix", "smoke-rs:"}, load...)...)
		positive(t, res, "pairs", "pairs_per_s", "redis_us_per_pair", "redis_cmds_per_pair")
		if res["errors"] != "0" {
			t.Errorf("errors=%s", res["errors"])
		}
	})
	t.Run("bare", func(t *testing.T) {
		res := runTool(t, append([]string{"bare", "-rounds", "1", "-prefix", "smoke-bare:", "-record", doc}, load...)...)
		positive(t, res, "lockapi_pairs_per_s", "bare_pairs_per_s", "bare_redis_us_per_pair")
		if res["lockapi_errors"] != "0" || res["bare_errors"] != "0" {
			t.Errorf("lockapi_errors=%s bare_errors=%s", res["lockapi_errors"], res["bare_errors"])
		}
		if _, ok := res["bare_server_us_per_pair"]; !ok {
			t.Error("no server CPU of the bare front, which runs in a process of its own")
		}
	})
	t.Run("cost", func(t *testing.T) {
		mem := memory.New()
		t.Cleanup(func() { _ = mem.Close() })
		res := runTool(t, append([]string{"cost", "-rounds", "2", "-prefix", "smoke-c:", "-memory", serve(t, mem, nil), "-record", doc}, load...)...)
		positive(t, res, "redisson_redis_us_per_pair", "lockapi_redis_us_per_pair", "bare_redis_us_per_pair",
			"lockapi_memory_pairs_per_s", "bare_memory_pairs_per_s")
		if got := strings.Count(res["lockapi_redis_us_per_pair_rounds"], ",") + 1; got != 2 {
			t.Errorf("lockapi_redis_us_per_pair_rounds=%s, want 2 rounds", res["lockapi_redis_us_per_pair_rounds"])
		}
	})
	t.Run("idle", func(t *testing.T) {
		res := runTool(t, "idle", "-server", server, "-redis", redisURL, "-prefix", "smoke-i:", "-waiters", "30",
			"-window", "300ms", "-settle", "200ms", "-record", doc)
		positive(t, res, "waiters", "server_rss_mb", "redis_clients", "redis_pubsub_conns")
		if !strings.HasPrefix(res["parked_by"], "settle") {
			t.Errorf("parked_by=%s, want settle: this server has no /metrics", res["parked_by"])
		}
	})

	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| CPU |", "| Redis | Redis ", "| all |", "| throughput |", "| rate |", "| handoff |", "| idle |", "| bare |", "| cost |", "lockbench throughput -prefix smoke-t:"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q:\n%s", doc, want, b)
		}
	}
}

// TestSmoke_idleMetrics parks waiters on a server with /metrics, where the
// tool learns that they are parked from lockapi_waiters, and RSS and
// goroutines come from the server's own figures.
func TestSmoke_idleMetrics(t *testing.T) {
	server, redisURL := openServer(t, metrics.New())
	res := runTool(t, "idle", "-server", server, "-redis", redisURL, "-waiters", "40", "-window", "300ms")
	if !strings.HasPrefix(res["parked_by"], "metrics+redis_quiet") || res["lockapi_waiters"] != "40" {
		t.Errorf("parked_by=%s lockapi_waiters=%s, want metrics and 40", res["parked_by"], res["lockapi_waiters"])
	}
	if res["server_mem_from"] != "metrics" {
		t.Errorf("server_mem_from=%s, want metrics", res["server_mem_from"])
	}
	positive(t, res, "goroutines", "server_rss_mb")
	if res["redis_pubsub_conns"] != "1" || res["lock_cmds_per_s"] != "0.00" {
		t.Errorf("redis_pubsub_conns=%s lock_cmds_per_s=%s, want 1 and 0.00 while the lock stays held",
			res["redis_pubsub_conns"], res["lock_cmds_per_s"])
	}
}

// TestRun_usage checks that mistakes are told apart from failed runs.
func TestRun_usage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nosuchmode"},
		{"throughput", "-c", "0"},
		{"throughput", "-vs", "x"},
		{"throughput", "extra"},
		{"handoff", "-against", "http://127.0.0.1:1"},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code != 2 {
			t.Errorf("lockbench %q: exit %d, want 2 (stderr %q)", args, code, errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"throughput", "-server", "http://127.0.0.1:1", "-duration", "1s"}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "is lockapi running") {
		t.Errorf("no server: exit %d, stderr %q; want 1 and a hint", code, errOut.String())
	}
}

// TestRecord checks that recording replaces the row of the same mode and
// label, keeps the others, and judges -vs against the recorded run.
func TestRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "B.md")
	rec := func(label, vs string, pairs float64) {
		t.Helper()
		cfg := &config{mode: "throughput", record: path, label: label, vs: vs, args: []string{"throughput", "-label", label}}
		r := cfg.newResult()
		r.setFloat("pairs_per_s", pairs, 0)
		if err := record(context.Background(), cfg, r, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
	}
	rec("metrics-off", "", 1000)
	// Notes written by hand between the markers survive every recording.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const notes = notesBegin + "\n## What the rows mean\n\nhand-written\n" + notesEnd
	doc := strings.Replace(string(b), "## How to reproduce", notes+"\n\n## How to reproduce", 1)
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	rec("metrics-off", "", 1100) // replaces the first
	rec("metrics-on", "metrics-off", 1067)

	b, err = os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(b), notes) != 1 {
		t.Errorf("the notes did not survive two recordings:\n%s", b)
	}
	rows, m := parseDoc(string(b))
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2:\n%s", len(rows), b)
	}
	if m.cpu == "" || m.goVersion == "" {
		t.Errorf("machine not described: %+v", m)
	}
	off, on := rows[0], rows[1]
	if off.label != "metrics-off" || !strings.Contains(off.result, "pairs_per_s=1100") {
		t.Errorf("first row %+v, want metrics-off at 1100", off)
	}
	if on.label != "metrics-on" || !strings.Contains(on.measured, "3.0%") || on.verdict != "PASS" {
		t.Errorf("second row %+v, want a 3.0%% cost and PASS", on)
	}

	cfg := &config{mode: "throughput", record: path, label: "x", vs: "nosuch"}
	if err := record(context.Background(), cfg, cfg.newResult(), &bytes.Buffer{}); err == nil {
		t.Error("-vs of an unrecorded label: no error")
	}
}

func TestCommandDiff(t *testing.T) {
	a := map[string]int64{"evalsha": 10, "info": 3, "ping": 1}
	b := map[string]int64{"evalsha": 14, "info": 5, "client|list": 1, "client|id": 1, "ping": 2, "publish": 1}
	all, lock, s := commandDiff(a, b)
	if all != 6 || lock != 5 || s != "evalsha:4,ping:1,publish:1" {
		t.Errorf("commandDiff = %d, %d, %q", all, lock, s)
	}
	if _, _, s := commandDiff(a, a); s != "none" {
		t.Errorf("no commands: %q", s)
	}
}

// TestSmoke_sessions runs the sessions mode briefly on the memory store,
// the store that keeps sessions: a multi-lock of 64 and one of the rest
// per session, renewals, DELETEs and expiries.
func TestSmoke_sessions(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	server := serve(t, mem, nil)
	res := runTool(t, "sessions", "-server", server, "-sessions", "12", "-leases", "70", "-session-ttl", "2s", "-prefix", "smoke-s:")
	positive(t, res, "renew_p50_ms", "delete_max_ms", "expiry_to_free_max")
	if res["sessions"] != "12" || res["leases_per_session"] != "70" || res["redis_cmds_per_renewal"] != "" {
		t.Errorf("result %v", res)
	}
	if st, err := mem.Inspect(context.Background(), "smoke-s:sess-11-69"); err != nil || st.Held {
		t.Errorf("a lock of an expired session: %+v, %v", st, err)
	}
}
