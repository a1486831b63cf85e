package http

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// waiterLimits caps how many requests of one kind may wait at once, per
// caller and overall, so that one client cannot tie up the server's waiting
// capacity. A server has two: one for waiting acquires and event streams,
// one for blocking queries (watches), so that an SDK's loss watches, one per
// held lease, never crowd out its caller's waiting acquires.
type waiterLimits struct {
	perCaller, total int
	// what names the requests counted, in a refusal's detail.
	what string

	mu    sync.Mutex
	count map[string]int
	all   int
}

func newWaiterLimits(perCaller, total int, what string) *waiterLimits {
	return &waiterLimits{perCaller: perCaller, total: total, what: what, count: map[string]int{}}
}

// enter admits one more waiter for key, or returns a rate-limited error. The
// returned func gives the place back.
func (l *waiterLimits) enter(key string) (func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.all >= l.total:
		return nil, &httpError{kindRateLimited, fmt.Sprintf("the server already has %d %s; try again later", l.total, l.what)}
	case l.count[key] >= l.perCaller:
		return nil, &httpError{kindRateLimited, fmt.Sprintf("you already have %d %s; try again later", l.perCaller, l.what)}
	}
	l.all++
	l.count[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.all--
			if l.count[key]--; l.count[key] == 0 {
				delete(l.count, key)
			}
		})
	}, nil
}

// Len returns the number of requests waiting.
func (l *waiterLimits) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all
}

// beginWait admits a waiting request (a long-poll acquire or an event
// stream) under the waiter limits, and returns the context it waits on: it
// ends when the client goes away or the server begins to close, whichever is
// first. end gives the waiter's place back.
func (s *Server) beginWait(r *http.Request, c caller) (ctx context.Context, end func(), err error) {
	return s.begin(s.waiters, r, c)
}

// beginWatch is beginWait for a blocking query, under the limits of
// blocking queries, apart from the waiters': a client's loss watches (one
// per held lease) must not refuse its waiting acquires.
func (s *Server) beginWatch(r *http.Request, c caller) (ctx context.Context, end func(), err error) {
	return s.begin(s.watches, r, c)
}

func (s *Server) begin(limits *waiterLimits, r *http.Request, c caller) (ctx context.Context, end func(), err error) {
	leave, err := limits.enter(c.limitKey(r))
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	stop := context.AfterFunc(s.closing, func() { cancel(errShuttingDown) })
	return ctx, func() {
		stop()
		cancel(nil)
		leave()
	}, nil
}

// rateLimits is a token bucket per caller (golang.org/x/time/rate). Buckets
// of callers who stayed quiet long enough to refill are dropped, so the map
// does not grow with every client address ever seen.
type rateLimits struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

func newRateLimits(perSecond float64, burst int) *rateLimits {
	if burst < 1 {
		burst = max(1, int(perSecond))
	}
	return &rateLimits{limit: rate.Limit(perSecond), burst: burst, buckets: map[string]*bucket{}, swept: time.Now()}
}

// allow takes a token for key; when there is none it returns how long until
// there is.
func (l *rateLimits) allow(key string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	full := time.Duration(float64(l.burst) / float64(l.limit) * float64(time.Second))
	if now.Sub(l.swept) > full+time.Minute {
		for k, b := range l.buckets {
			if now.Sub(b.seen) > full {
				delete(l.buckets, k)
			}
		}
		l.swept = now
	}
	b := l.buckets[key]
	if b == nil {
		b = &bucket{lim: rate.NewLimiter(l.limit, l.burst)}
		l.buckets[key] = b
	}
	b.seen = now
	r := b.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// rateLimit answers 429 with Retry-After to a caller over its request rate.
// It runs after authenticate, so callers are keyed by principal (or address
// on an open server).
func (s *Server) rateLimit(next http.Handler) http.Handler {
	if s.rates == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := callerOf(r).limitKey(r)
		if ok, wait := s.rates.allow(key, time.Now()); !ok {
			w.Header().Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
			Error(w, r, &httpError{kindRateLimited, "too many requests; slow down"})
			return
		}
		next.ServeHTTP(w, r)
	})
}
