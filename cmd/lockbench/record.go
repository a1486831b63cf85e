package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The benchmarks file is written by the tool, never by hand: a run with
// -record reads the rows already there, replaces the row of the same mode
// and label (or adds one), and writes the whole file again with a fresh
// description of the machine. Numbers in it therefore always come with the
// command that produced them and the machine they were measured on.

const (
	rowsBegin = "<!-- lockbench:rows:begin -->"
	rowsEnd   = "<!-- lockbench:rows:end -->"
	// Text between these markers is written by hand (what the rows
	// mean); a recording keeps it as it is.
	notesBegin = "<!-- lockbench:notes:begin -->"
	notesEnd   = "<!-- lockbench:notes:end -->"
)

// targetMetricsOverhead is the most throughput that metrics may cost.
const targetMetricsOverhead = 0.05

// row is one line of the results table.
type row struct {
	date, mode, label, command, result, target, measured, verdict string
}

func (r row) cells() []string {
	return []string{r.date, r.mode, r.label, r.command, r.result, r.target, r.measured, r.verdict}
}

// modeOrder orders the table: the headline ratio first.
var modeOrder = []string{"all", "cost", "bare", "redisson", "throughput", "baseline", "rate", "handoff", "idle", "sse", "webhooks", "sessions"}

// record adds res to the benchmarks file cfg.record.
func record(ctx context.Context, cfg *config, res *result, log io.Writer) error {
	old, err := os.ReadFile(cfg.record)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	rows, oldMachine := parseDoc(string(old))

	if cfg.vs != "" {
		t, err := compareWith(rows, cfg, res)
		if err != nil {
			return err
		}
		res.targets = append(res.targets, t)
	}

	m := describeMachine(ctx, cfg, oldMachine)
	if oldMachine.cpu != "" && (oldMachine.cpu != m.cpu || oldMachine.memory != m.memory) {
		fmt.Fprintf(log, "lockbench: warning: %s holds results from another machine (%s, %s); rows measured here and there are now side by side\n",
			cfg.record, oldMachine.cpu, oldMachine.memory)
	}

	nr := newRow(cfg, res, m.date)
	i := slices.IndexFunc(rows, func(r row) bool { return r.mode == nr.mode && r.label == nr.label })
	if i >= 0 {
		rows[i] = nr
	} else {
		rows = append(rows, nr)
	}
	slices.SortStableFunc(rows, func(a, b row) int {
		if d := modeRank(a.mode) - modeRank(b.mode); d != 0 {
			return d
		}
		return strings.Compare(a.label, b.label)
	})

	if err := os.MkdirAll(filepath.Dir(cfg.record), 0o755); err != nil {
		return err
	}
	tmp := cfg.record + ".tmp"
	if err := os.WriteFile(tmp, []byte(renderDoc(m, rows, notesOf(string(old)))), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, cfg.record); err != nil {
		return err
	}
	fmt.Fprintf(log, "lockbench: recorded in %s\n", cfg.record)
	return nil
}

func modeRank(mode string) int {
	if i := slices.Index(modeOrder, mode); i >= 0 {
		return i
	}
	return len(modeOrder)
}

// newRow turns a result into a table row.
func newRow(cfg *config, res *result, date string) row {
	var kv []string
	for _, f := range res.fields {
		if f.key != "mode" && f.key != "label" {
			kv = append(kv, f.key+"="+f.val)
		}
	}
	r := row{
		date:    date,
		mode:    cfg.mode,
		label:   cfg.label,
		command: "`" + cfg.commandLine() + "`",
		result:  "`" + strings.Join(kv, " ") + "`",
	}
	var want, got, verdict []string
	for _, t := range res.targets {
		want = append(want, t.What+": "+t.Want)
		got = append(got, t.Got)
		switch {
		case t.NA:
			verdict = append(verdict, "n/a (conditions differ)")
		case t.Pass:
			verdict = append(verdict, "PASS")
		default:
			verdict = append(verdict, "**MISS**")
		}
	}
	r.target = strings.Join(want, "<br>")
	r.measured = strings.Join(got, "<br>")
	r.verdict = strings.Join(verdict, "<br>")
	return r
}

// compareWith judges a throughput run against the recorded run of the
// label cfg.vs in the same mode: the metrics-overhead target, with
// -label metrics-on -vs metrics-off.
func compareWith(rows []row, cfg *config, res *result) (target, error) {
	i := slices.IndexFunc(rows, func(r row) bool { return r.mode == cfg.mode && r.label == cfg.vs })
	if i < 0 {
		return target{}, fmt.Errorf("-vs %s: %s has no %s run labelled %q; record that one first", cfg.vs, cfg.record, cfg.mode, cfg.vs)
	}
	ref, err := strconv.ParseFloat(parseLine(strings.Trim(rows[i].result, "`"))["pairs_per_s"], 64)
	if err != nil || ref <= 0 {
		return target{}, fmt.Errorf("-vs %s: the recorded run has no pairs_per_s", cfg.vs)
	}
	got, err := strconv.ParseFloat(res.get("pairs_per_s"), 64)
	if err != nil {
		return target{}, fmt.Errorf("-vs compares pairs/s, which mode %s does not measure", cfg.mode)
	}
	cost := 1 - got/ref
	return target{
		What: fmt.Sprintf("pairs/s cost vs %q (%.0f pairs/s, %s)", cfg.vs, ref, rows[i].date),
		Want: fmt.Sprintf("≤ %.0f%%", targetMetricsOverhead*100),
		Got:  fmt.Sprintf("%.1f%% (%.0f pairs/s)", cost*100, got),
		Pass: cost <= targetMetricsOverhead,
	}, nil
}

// parseDoc reads the rows and the machine description of an existing file.
func parseDoc(doc string) ([]row, machine) {
	var rows []row
	var m machine
	in := false
	for line := range strings.Lines(doc) {
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == rowsBegin:
			in = true
		case line == rowsEnd:
			in = false
		case in && strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| Date") && !strings.HasPrefix(line, "|---"):
			c := splitRow(line)
			if len(c) == 8 {
				rows = append(rows, row{c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]})
			}
		case !in && strings.HasPrefix(line, "| "):
			c := splitRow(line)
			if len(c) == 2 {
				m.set(c[0], c[1])
			}
		}
	}
	return rows, m
}

// splitRow splits a table line into its cells, honouring \| inside cells.
func splitRow(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	var cells []string
	var b strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			b.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(b.String()))
			b.Reset()
		default:
			b.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(b.String()))
}

func escapeCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// machine describes where the numbers were measured.
type machine struct {
	cpu, memory, os, goVersion, redis, date string
}

var machineRows = []struct {
	name string
	get  func(*machine) *string
}{
	{"CPU", func(m *machine) *string { return &m.cpu }},
	{"Memory", func(m *machine) *string { return &m.memory }},
	{"OS", func(m *machine) *string { return &m.os }},
	{"Go", func(m *machine) *string { return &m.goVersion }},
	{"Redis", func(m *machine) *string { return &m.redis }},
	{"Last recorded", func(m *machine) *string { return &m.date }},
}

func (m *machine) set(name, val string) {
	for _, r := range machineRows {
		if r.name == name {
			*r.get(m) = val
		}
	}
}

// describeMachine looks at this machine. The Redis version comes from
// INFO server when the run had a Redis to ask; otherwise the file's earlier
// value is kept.
func describeMachine(ctx context.Context, cfg *config, old machine) machine {
	m := machine{
		cpu:       fmt.Sprintf("%s, %d cores", cpuModel(), runtime.NumCPU()),
		memory:    memTotal(),
		os:        fmt.Sprintf("%s/%s, Linux %s", runtime.GOOS, runtime.GOARCH, readTrim("/proc/sys/kernel/osrelease")),
		goVersion: runtime.Version(),
		redis:     old.redis,
		date:      time.Now().UTC().Format("2006-01-02 15:04 UTC"),
	}
	if cfg.redisGiven || cfg.mode == "baseline" || cfg.mode == "all" || cfg.mode == "idle" {
		if rdb, err := openRedis(ctx, cfg.redisURL, 1); err == nil {
			if info, err := redisInfo(ctx, rdb, "server"); err == nil {
				m.redis = "Redis " + info["redis_version"]
				if v := info["redis_mode"]; v != "" {
					m.redis += " (" + v + ")"
				}
			}
			rdb.Close()
		}
	}
	if m.redis == "" {
		m.redis = "unknown (record a run with -redis)"
	}
	return m
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(v)
			if kb, err := strconv.ParseFloat(f[0], 64); err == nil {
				return fmt.Sprintf("%.1f GiB", kb/(1<<20))
			}
		}
	}
	return "unknown"
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// renderDoc writes the whole file.
// notesOf returns the hand-written notes of a benchmarks file, markers
// included, or "" when it has none.
func notesOf(doc string) string {
	i, j := strings.Index(doc, notesBegin), strings.Index(doc, notesEnd)
	if i < 0 || j < i {
		return ""
	}
	return doc[i:j+len(notesEnd)] + "\n\n"
}

func renderDoc(m machine, rows []row, notes string) string {
	var b strings.Builder
	b.WriteString(`# Benchmarks

The benchmark results ` + "`cmd/lockbench`" + ` recorded, each beside its target. Back to the
[README](../README.md).

<!-- Written by cmd/lockbench -record: a hand edit is lost at the next recording. -->

These numbers come from ` + "`lockbench`" + ` (` + "`go run ./cmd/lockbench`" + `, or a binary
built from it) driving a running lockapi over HTTP. Each row is the latest run
of its mode and label, with the exact command line; ` + "`-record`" + ` replaces the
row when that run is repeated. The result column is the tool's result line.

## Machine

| | |
|---|---|
`)
	for _, r := range machineRows {
		fmt.Fprintf(&b, "| %s | %s |\n", r.name, escapeCell(*r.get(&m)))
	}
	b.WriteString(`
## Reading the results

lockbench, lockapi and Redis share this machine's cores, so a load result
also says how many cores each used (` + "`tool_cpu_cores`, `server_cpu_cores`, `redis_cpu_cores`" + `;
1.00 is one core busy) and how much other work ran meanwhile
(` + "`other_cpu_cores`" + `, and ` + "`load1`" + `, the load average before the run). Rows with
other work are not comparable with rows without. ` + "`cpu_us_per_pair`" + ` is the CPU time
one acquire+release cost the three together: it moves with a change to the
server, and much less with the machine's mood. ` + "`redis_us_per_pair`" + ` and
` + "`server_us_per_pair`" + ` split out Redis's share (INFO's used_cpu_user +
used_cpu_sys, every thread of redis-server, so that Redis must serve the run
alone) and the server's (its /proc/<pid>/stat, in 10 ms ticks);
` + "`redis_cmds_per_pair`" + ` counts the commands Redis ran per pair, those the
scripts run included, the script calls themselves not, and
` + "`redis_reads_per_pair`" + ` its socket reads (about one per pipeline). The comparison modes
(` + "`cost`, `bare`" + `) run each setup once per round, alternating the order, and give
each figure's median with every round's value (` + "`*_rounds`" + `). Latencies are in milliseconds
(` + "`acq_*`" + `: the acquire alone; in ` + "`rate`" + `, from the cycle's scheduled start, and
` + "`late`" + ` counts the cycles started more than 1 ms behind schedule). A ` + "`409`" + `
(two clients picked the same name) is a ` + "`conflict`" + `, not a pair.

`)
	b.WriteString(`## Targets

- **Throughput:** over HTTP at 32 clients on 100,000 names, at least 60% of the
  pairs/s of the same cycle straight on Redis (` + "`all`" + `: both in one invocation).
- **Latency under load:** acquire p99 ≤ 5 ms at 80% of that peak (` + "`rate -rate 80%`" + `,
  open loop, measured from each cycle's scheduled start).
- **Hand-off:** release to the next waiter's grant p50 ≤ 1 ms, p99 ≤ 5 ms with
  10 waiters (` + "`handoff`" + `).
- **Idle waiters:** 10,000 parked long-polls cost ≤ 100 MB of extra server RSS,
  ≤ 2 Redis pub/sub connections and 0 Redis commands/s while the lock stays
  held (` + "`idle`" + `).
- **Metrics:** enabling metrics costs ≤ 5% of throughput: ` + "`throughput -against`" + ` a
  second server with ` + "`LOCKAPI_METRICS=false`" + `, rounds alternating between the two
  in one invocation (or two recorded runs, ` + "`-label metrics-on -vs metrics-off`" + `).
- **Redis work per pair:** through lockapi at 32 clients on 100,000 names, batching
  on, Redis spends ≤ 32 µs of CPU per acquire+release pair, what a Redisson-style
  script pair straight from go-redis costs it (` + "`cost`" + `: both, and lockapi with events
  off, in alternating rounds of one invocation).
- **Server work per pair:** lockapi's own CPU per pair is ≤ 1.15× that of a bare front
  (issue 23), the smallest net/http server running the same store and scripts with none of
  lockapi's validation, authentication, logs or metrics, but with the same timeouts,
  request id and signed release URL, on Redis and on the memory
  store (` + "`cost`" + `, or ` + "`bare`" + `).
- **Webhooks at scale:** with 1,000 webhooks on one instance, acquires and webhook
  creations answer within 1 s and never 503 while events are delivered to every
  webhook (` + "`webhooks`" + `, which also records deliveries/s and Redis commands per
  delivery; ` + "`tests/webhook_scale_test.go`" + ` holds 100 webhooks to 4,000
  deliveries within 30 s).

- **Sessions:** 1,000 sessions × 100 leases: renewing a session costs at most
  5 Redis commands whatever it holds, and a session's end (its expiry, or
  ` + "`DELETE`" + `) frees all its leases within 2 s (` + "`sessions`" + `,
  [SESSIONS.md](SESSIONS.md)).

## Results

` + rowsBegin + `
| Date | Mode | Label | Command | Result | Target | Measured | Verdict |
|---|---|---|---|---|---|---|---|
`)
	for _, r := range rows {
		cells := r.cells()
		for i := range cells {
			cells[i] = escapeCell(cells[i])
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	b.WriteString(rowsEnd + "\n\n" + notes + `## How to reproduce

` + "```sh" + `
redis-server --port 6399 --save '' --appendonly no --daemonize yes
go build -o /tmp/lockapi ./cmd/lockapi && go build -o /tmp/lockbench ./cmd/lockbench
export LOCKAPI_REDIS_URL=redis://127.0.0.1:6399/0 LOCKAPI_LOG_LEVEL=warn \
  LOCKAPI_MAX_WAITERS=20000 LOCKAPI_MAX_WAITERS_PER_CALLER=20000
R=redis://127.0.0.1:6399/0

/tmp/lockapi &                        # metrics on (the default)
/tmp/lockbench all -redis $R -record docs/BENCHMARKS.md
/tmp/lockbench rate -rate 80% -redis $R -record docs/BENCHMARKS.md
/tmp/lockbench handoff -redis $R -record docs/BENCHMARKS.md
kill %1; /tmp/lockapi &               # idle: a fresh process, so that RSS starts low
/tmp/lockbench idle -redis $R -record docs/BENCHMARKS.md
/tmp/lockbench sse -redis $R -record docs/BENCHMARKS.md
for k in lock fair semaphore multi shared; do        # the lock kinds
  /tmp/lockbench handoff -kind $k -label kind-$k -prefix h$k: -redis $R -record docs/BENCHMARKS.md
  /tmp/lockbench throughput -kind $k -label kind-$k -prefix t$k: -redis $R -record docs/BENCHMARKS.md
done

LOCKAPI_EVENTS=false LOCKAPI_ADDR=:8081 LOCKAPI_REDIS_URL=redis://127.0.0.1:6398/0 /tmp/lockapi &   # events off
/tmp/lockbench throughput -label events -against http://127.0.0.1:8081 -redis $R -record docs/BENCHMARKS.md
kill %2

LOCKAPI_ADDR=:8081 LOCKAPI_METRICS=false /tmp/lockapi &   # metrics off, beside the first
/tmp/lockbench throughput -label metrics -against http://127.0.0.1:8081 -redis $R -record docs/BENCHMARKS.md

# Redis and server CPU per pair (cost): the lockapi above (events on), one
# with events off on the same Redis, one on the memory store; lockbench
# starts the bare fronts itself.
LOCKAPI_ADDR=:8082 LOCKAPI_EVENTS=false LOCKAPI_KEY_PREFIX=lockapi-noev: /tmp/lockapi &
LOCKAPI_ADDR=:8083 LOCKAPI_REDIS_URL= /tmp/lockapi &
/tmp/lockbench cost -rounds 5 -events-off http://127.0.0.1:8082 -memory http://127.0.0.1:8083 -redis $R -record docs/BENCHMARKS.md
` + "```" + `

The idle mode needs about 10,300 open files in lockbench and in the server
(` + "`ulimit -n`" + `), and a server whose waiter limits admit 10,000 waiters from one
address (` + "`LOCKAPI_MAX_WAITERS`, `LOCKAPI_MAX_WAITERS_PER_CALLER`" + `). On a shared
machine, run when it is otherwise idle: ` + "`other_cpu_cores`" + ` shows whether it was.
`)
	return b.String()
}
