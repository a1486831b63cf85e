package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// httpCycler does the cycle a lockapi client does: POST an acquire with a
// small JSON body, DELETE the lease it got.
type httpCycler struct{ s *session }

func (h *httpCycler) cycle(ctx context.Context, name string) (time.Duration, outcome, error) {
	t0 := time.Now()
	rep, err := h.s.acquire(ctx, name)
	lat := time.Since(t0)
	if err != nil {
		return lat, failed, transportError(err)
	}
	switch rep.status {
	case http.StatusCreated:
	case http.StatusConflict:
		return lat, conflict, nil
	case http.StatusOK:
		// Owners are distinct per client and every client releases before
		// its next acquire, so a reentrant grant means another tool runs
		// with the same names. Give the hold back.
		_, _ = h.s.release(ctx, name, rep.leaseID)
		return lat, failed, fmt.Errorf("acquire %s: reentrant grant: is another lockbench using -prefix %q?", name, strings.TrimRight(name, "0123456789"))
	default:
		return lat, failed, statusFailure("acquire "+name, rep)
	}
	rel, err := h.s.release(ctx, name, rep.leaseID)
	if err != nil {
		return lat, failed, transportError(err)
	}
	if rel.status != http.StatusOK {
		return lat, failed, statusFailure("release "+name, rel)
	}
	return lat, pair, nil
}

// statusFailure is statusError, fatal when the answer means that every other
// request will get it too.
func statusFailure(what string, rep reply) error {
	err := statusError(what, rep)
	switch rep.status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
		http.StatusMethodNotAllowed, http.StatusUnsupportedMediaType, http.StatusBadRequest:
		return &fatalError{err}
	}
	return err
}

// transportError makes a refused connection fatal: the server is not there
// (or died), and counting a million refused cycles would help nobody.
func transportError(err error) error {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return &fatalError{fmt.Errorf("%w (is lockapi running at -server?)", err)}
	}
	return err
}

// preflight makes one cycle before a timed run, so that a wrong URL, key or
// prefix fails at once with the server's explanation.
func preflight(ctx context.Context, cl *client, cfg *config) error {
	s := cl.newKindSession(acquireBody("lockbench-preflight", cfg.ttl, 0, cfg.kind), cfg.kind)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rep, err := s.get(ctx, "/healthz")
	if err != nil {
		return fmt.Errorf("server %s: %w", cl.base, transportError(err))
	}
	if rep.status != http.StatusOK {
		return statusError("GET /healthz", rep)
	}
	_, out, err := (&httpCycler{s}).cycle(ctx, cfg.prefix+"preflight")
	if out == conflict {
		return fmt.Errorf("%spreflight is held by someone else: another lockbench is running with -prefix %q", cfg.prefix, cfg.prefix)
	}
	return err
}

// httpCyclers returns the cycler factory of the HTTP modes: client i sends
// owner lockbench-i.
func httpCyclers(cl *client, cfg *config) func(i int) cycler {
	return func(i int) cycler {
		return &httpCycler{cl.newKindSession(acquireBody("lockbench-"+strconv.Itoa(i), cfg.ttl, 0, cfg.kind), cfg.kind)}
	}
}

// throughput measures closed-loop pairs/s over HTTP; runAll reuses it.
func throughput(ctx context.Context, cfg *config, log io.Writer) (*loadRun, error) {
	cl, err := cfg.connect(ctx, cfg.c)
	if err != nil {
		return nil, err
	}
	defer cl.close()
	meter, done := cfg.meter(ctx, log)
	defer done()
	return closedLoop(ctx, cfg, meter, httpCyclers(cl, cfg), log)
}

// runThroughput is the throughput mode.
func runThroughput(ctx context.Context, cfg *config, log io.Writer) (*result, error) {
	if cfg.against != "" {
		return runAgainst(ctx, cfg, log)
	}
	run, err := throughput(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	return cfg.loadResult(run), nil
}

// loadResult is the result line of one closed-loop run.
func (cfg *config) loadResult(run *loadRun) *result {
	r := cfg.newResult()
	r.setInt("c", int64(cfg.c))
	r.setInt("k", int64(cfg.k))
	r.set("duration", cfg.duration.String())
	run.report(r)
	return r
}

// parseRate reads -rate: "8000" is pairs/s, "80%" a fraction of the peak.
func parseRate(s string) (perSec, ofPeak float64, err error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v <= 0 || v > 1000 {
			return 0, 0, fmt.Errorf("-rate %q: want pairs/s or a percentage of the peak like 80%%", s)
		}
		return 0, v / 100, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return 0, 0, fmt.Errorf("-rate %q: want pairs/s or a percentage of the peak like 80%%", s)
	}
	return v, 0, nil
}

// Targets of the load modes (docs/BENCHMARKS.md).
const (
	targetRatio     = 0.60                 // http pairs/s ≥ 60% of baseline at c=32, k=100000
	targetRateP99   = 5 * time.Millisecond // acquire p99 at 80% of the peak
	targetRateShare = 0.80
)

// runRate is the rate mode: an open-loop run at a fixed rate. With a
// percentage, the peak is measured first in the same invocation, so that
// "80% of the peak" refers to this machine as it is now.
func runRate(ctx context.Context, cfg *config, log io.Writer) (*result, error) {
	rate, share, err := parseRate(cfg.rate)
	if err != nil {
		return nil, err
	}
	cl, err := cfg.connect(ctx, cfg.inflight)
	if err != nil {
		return nil, err
	}
	defer cl.close()
	meter, done := cfg.meter(ctx, log)
	defer done()

	r := cfg.newResult()
	if share > 0 {
		fmt.Fprintf(log, "lockbench: measuring the peak first (closed loop)\n")
		peak, err := closedLoop(ctx, cfg, meter, httpCyclers(cl, cfg), log)
		if err != nil {
			return nil, fmt.Errorf("peak: %w", err)
		}
		rate = share * peak.pairsPerSec()
		r.setFloat("peak_pairs_per_s", peak.pairsPerSec(), 0)
		r.setFloat("share_of_peak", share, 2)
		r.setInt("peak_c", int64(cfg.c))
	}
	run, err := openLoop(ctx, cfg, meter, rate, httpCyclers(cl, cfg), log)
	if err != nil {
		return nil, err
	}
	r.setFloat("target_per_s", rate, 0)
	r.setInt("inflight", int64(cfg.inflight))
	r.setInt("k", int64(cfg.k))
	r.set("duration", cfg.duration.String())
	run.report(r)
	r.setInt("late", run.late)

	p99 := run.stats.acq.Quantile(0.99)
	what := fmt.Sprintf("acquire p99 at %.0f pairs/s", rate)
	if share > 0 {
		what = fmt.Sprintf("acquire p99 at %.0f%% of peak (%.0f pairs/s)", share*100, rate)
	}
	r.targets = append(r.targets, target{
		What: what,
		Want: "≤ " + fmtGoal(targetRateP99) + fmt.Sprintf(" at %.0f%% of peak", targetRateShare*100),
		Got:  fmtMs(p99),
		Pass: p99 <= targetRateP99,
		NA:   share != targetRateShare,
	})
	return r, nil
}

// fmtMs writes a measured latency for people: "0.412 ms".
func fmtMs(d time.Duration) string {
	return strconv.FormatFloat(ms(d), 'f', 3, 64) + " ms"
}

// fmtGoal writes a target latency: "5 ms".
func fmtGoal(d time.Duration) string {
	return strconv.FormatFloat(ms(d), 'f', -1, 64) + " ms"
}

// targetOverhead is the most throughput a server variant may lose against
// another (metrics on against metrics off).
const targetOverhead = 0.05

// runAgainst compares two servers, -server and -against (say metrics on and
// off), in one invocation: throughput rounds alternate between them, in the
// order AB BA AB…, and the cost is one minus the geometric mean of the
// per-round ratios A/B. On a shared or virtual machine the rate drifts by
// more than the few percent such a comparison is after; each ratio compares
// two runs made back to back, so the drift cancels out.
func runAgainst(ctx context.Context, cfg *config, log io.Writer) (*result, error) {
	var runs [2][]*loadRun
	servers := [2]string{cfg.server, cfg.against}
	for i := range 2 * cfg.rounds {
		which := []int{0, 1, 1, 0}[i%4]
		c := *cfg
		c.server = servers[which]
		fmt.Fprintf(log, "lockbench: round %d of %d on %s\n", i/2+1, cfg.rounds, c.server)
		run, err := throughput(ctx, &c, log)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.server, err)
		}
		runs[which] = append(runs[which], run)
	}
	med := func(rs []*loadRun) (*loadRun, string) {
		sorted := slices.Clone(rs)
		slices.SortFunc(sorted, func(a, b *loadRun) int { return cmp.Compare(a.pairsPerSec(), b.pairsPerSec()) })
		var all []string
		for _, r := range rs {
			all = append(all, strconv.FormatFloat(r.pairsPerSec(), 'f', 0, 64))
		}
		return sorted[len(sorted)/2], strings.Join(all, ",")
	}
	a, aRounds := med(runs[0])
	b, bRounds := med(runs[1])
	logRatio := 0.0
	for i := range runs[0] {
		logRatio += math.Log(runs[0][i].pairsPerSec() / runs[1][i].pairsPerSec())
	}
	ratio := math.Exp(logRatio / float64(len(runs[0])))
	r := cfg.newResult()
	r.setInt("c", int64(cfg.c))
	r.setInt("k", int64(cfg.k))
	r.set("duration", cfg.duration.String())
	r.setInt("rounds", int64(cfg.rounds))
	a.report(r) // the median round of -server
	r.set("rounds_pairs_per_s", aRounds)
	r.set("against", cfg.against)
	r.setFloat("against_pairs_per_s", b.pairsPerSec(), 0)
	r.set("against_rounds_pairs_per_s", bRounds)
	if us, ok := b.cpuPerPair(); ok {
		r.setFloat("against_cpu_us_per_pair", us, 0)
	}
	cost := 1 - ratio
	r.setFloat("cost", cost, 3)
	if cfg.label != "" && cfg.label != "metrics" && cfg.label != "events" {
		// A comparison of setups (redlock against single, say), not
		// the overhead of a feature: measured, with no target.
		return r, nil
	}
	r.targets = append(r.targets, target{
		What: fmt.Sprintf("pairs/s cost against %s (%d alternating rounds each)", cfg.against, cfg.rounds),
		Want: fmt.Sprintf("≤ %.0f%%", targetOverhead*100),
		Got:  fmt.Sprintf("%.1f%% (medians %.0f vs %.0f pairs/s)", cost*100, a.pairsPerSec(), b.pairsPerSec()),
		Pass: cost <= targetOverhead,
	})
	return r, nil
}
