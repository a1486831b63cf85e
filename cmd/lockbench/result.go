package main

import (
	"strconv"
	"strings"
	"time"
)

// result is one run's outcome: ordered key=value fields, printed as a single
// line so that a shell loop can grep and cut it, and the targets the run is
// judged against, which -record writes beside the measured values.
type result struct {
	fields  []field
	targets []target
}

type field struct{ key, val string }

// target is one goal of docs/BENCHMARKS.md with the value measured for it.
type target struct {
	What string // what is measured, e.g. "acquire p99"
	Want string // the goal, e.g. "≤ 5 ms"
	Got  string // the measured value, e.g. "3.2 ms"
	Pass bool
	// NA is set when the run's conditions differ from the target's (another
	// concurrency, another share of the peak): the values are shown, the
	// verdict is "n/a".
	NA bool
}

// set adds or replaces a field. Spaces and '=' would break the line's
// key=value grammar, so they become '_'.
func (r *result) set(key, val string) {
	val = strings.Map(func(c rune) rune {
		if c == ' ' || c == '=' || c == '\t' || c == '\n' {
			return '_'
		}
		return c
	}, val)
	if val == "" {
		val = "-"
	}
	for i := range r.fields {
		if r.fields[i].key == key {
			r.fields[i].val = val
			return
		}
	}
	r.fields = append(r.fields, field{key, val})
}

func (r *result) setInt(key string, v int64) { r.set(key, strconv.FormatInt(v, 10)) }

// setFloat writes v with prec decimals.
func (r *result) setFloat(key string, v float64, prec int) {
	r.set(key, strconv.FormatFloat(v, 'f', prec, 64))
}

// setMs writes a duration as milliseconds with microsecond resolution, the
// unit every latency of the result line uses.
func (r *result) setMs(key string, d time.Duration) { r.setFloat(key, ms(d), 3) }

// get returns a field's value, or "".
func (r *result) get(key string) string {
	for _, f := range r.fields {
		if f.key == key {
			return f.val
		}
	}
	return ""
}

// line is the result line: "lockbench key=value key=value …".
func (r *result) line() string {
	var b strings.Builder
	b.WriteString("lockbench")
	for _, f := range r.fields {
		b.WriteByte(' ')
		b.WriteString(f.key)
		b.WriteByte('=')
		b.WriteString(f.val)
	}
	return b.String()
}

// parseLine splits a result line (or any run of key=value words) into a map;
// words without '=' are ignored.
func parseLine(line string) map[string]string {
	m := map[string]string{}
	for w := range strings.FieldsSeq(line) {
		if k, v, ok := strings.Cut(w, "="); ok {
			m[k] = v
		}
	}
	return m
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// addLatencies writes p50, p99, p999 and max of h under prefix.
func (r *result) addLatencies(prefix string, h *hist) {
	r.setMs(prefix+"_p50_ms", h.Quantile(0.50))
	r.setMs(prefix+"_p99_ms", h.Quantile(0.99))
	r.setMs(prefix+"_p999_ms", h.Quantile(0.999))
	r.setMs(prefix+"_max_ms", h.Max())
}
