package main

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// value reads the text of one setting (a flag or a LOCKAPI_* variable) into
// the field it is bound to. Every command reads its settings through values,
// so that a bad one is reported the one way: what was set, the text, and
// the form wanted (badValue).
type value struct {
	arg    string               // the argument's name in help: DURATION, N, FILE
	def    string               // the default as help shows it; "" for none
	secret bool                 // the text is never echoed back
	set    func(s string) error // reads s; its error says what is wanted
}

// badValue is a setting whose text does not read: one line that names what
// the user set (a variable or a flag), the text, and what would do.
type badValue struct {
	from   string // LOCKAPI_ADDR or --addr
	text   string
	secret bool
	why    string // "want host:port, such as :8080"
}

func (e *badValue) Error() string {
	if e.secret {
		return fmt.Sprintf("%s (value not shown): %s", e.from, e.why)
	}
	return fmt.Sprintf("%s=%q: %s", e.from, e.text, e.why)
}

// wantf is the error of a value that does not read: what is wanted.
func wantf(format string, args ...any) error {
	return fmt.Errorf("want "+format, args...)
}

// bound is the range an integer or a duration must lie in.
type bound int

const (
	anySign     bound = iota
	notNegative       // 0 or more
	positive          // more than 0
)

func (b bound) admits(negative, zero bool) bool {
	switch b {
	case notNegative:
		return !negative
	case positive:
		return !negative && !zero
	}
	return true
}

func stringValue(p *string, def string) value {
	*p = def
	return value{arg: "TEXT", def: def, set: func(s string) error { *p = s; return nil }}
}

// oneOf is a string that must be one of options.
func oneOf(p *string, def string, options ...string) value {
	*p = def
	return value{arg: strings.Join(options, "|"), def: def, set: func(s string) error {
		if !slices.Contains(options, s) {
			return wantf("%s", orList(options))
		}
		*p = s
		return nil
	}}
}

func boolValue(p *bool, def bool) value {
	*p = def
	return value{arg: "true|false", def: strconv.FormatBool(def), set: func(s string) error {
		v, err := strconv.ParseBool(s)
		if err != nil {
			return wantf("true or false")
		}
		*p = v
		return nil
	}}
}

func intValue(p *int, def int, b bound) value {
	*p = def
	want := map[bound]string{anySign: "an integer", notNegative: "an integer, 0 or more", positive: "a positive integer"}[b]
	return value{arg: "N", def: strconv.Itoa(def), set: func(s string) error {
		v, err := strconv.Atoi(s)
		if err != nil || !b.admits(v < 0, v == 0) {
			return wantf("%s", want)
		}
		*p = v
		return nil
	}}
}

// rateValue is a number of requests per second, 0 or more.
func rateValue(p *float64, def float64) value {
	*p = def
	return value{arg: "RATE", def: strconv.FormatFloat(def, 'g', -1, 64), set: func(s string) error {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(v) || v < 0 {
			return wantf("a number of requests per second such as 100 or 2.5, 0 for no limit")
		}
		*p = v
		return nil
	}}
}

func durationValue(p *time.Duration, def time.Duration, b bound) value {
	*p = def
	return value{arg: "DURATION", def: shortDuration(def), set: func(s string) error {
		v, err := time.ParseDuration(s)
		if _, isNumber := strconv.ParseFloat(s, 64); err != nil && isNumber == nil && s != "0" {
			return wantf("a duration with a unit, such as %ss or %sms", s, s)
		}
		if err != nil || !b.admits(v < 0, v == 0) {
			kind := map[bound]string{anySign: "a duration", notNegative: "a duration of 0 or more", positive: "a positive duration"}[b]
			return wantf("%s with a unit, such as 500ms, 30s or 1h", kind)
		}
		*p = v
		return nil
	}}
}

// shortDuration writes d as help shows defaults: 24h, not 24h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// addrValue is a listen address, host:port; empty when optional.
func addrValue(p *string, def string, optional bool) value {
	*p = def
	return value{arg: "HOST:PORT", def: def, set: func(s string) error {
		if s == "" && optional {
			*p = s
			return nil
		}
		_, port, err := net.SplitHostPort(s)
		if err == nil {
			_, err = net.LookupPort("tcp", port)
		}
		if err != nil {
			return wantf("host:port, such as :8080 or 127.0.0.1:8080 (an empty host listens on every interface)")
		}
		*p = s
		return nil
	}}
}

// redisURLValue is empty (the memory store) or a redis:// or rediss:// URL;
// what its host names depends on the mode, which the store checks.
func redisURLValue(p *string) value {
	return value{arg: "URL", set: func(s string) error {
		u, err := url.Parse(s)
		if s != "" && (err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "") {
			return wantf("redis://host:port/db or rediss://host:port/db, such as redis://localhost:6379/0 (empty: the embedded memory store)")
		}
		*p = s
		return nil
	}}
}

// fileValue is the name of a file that can be read, or empty.
func fileValue(p *string) value {
	return value{arg: "FILE", set: func(s string) error {
		if s != "" {
			if _, err := os.ReadFile(s); err != nil {
				return fmt.Errorf("%s; want a file lockapi can read", fileProblem(err))
			}
		}
		*p = s
		return nil
	}}
}

// fileProblem is why a file could not be read, without the name that the
// line already shows.
func fileProblem(err error) string {
	if pe, ok := errors.AsType[*os.PathError](err); ok {
		return pe.Err.Error()
	}
	return err.Error()
}

// orList writes "a, b or c".
func orList(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
