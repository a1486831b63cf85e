package http

import (
	"context"
	"errors"
	"net/http"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/lock"
)

// requestScope is what the middleware learns of a request: its id, and its
// caller once authenticate found them. It is one context value, so that
// the request is copied (WithContext) once for both rather than once each.
type requestScope struct {
	id     string
	caller caller
}

// Run makes requestScope the hook of the request's logger: every line
// logged for the request carries its id. A hook costs a request that logs
// nothing (most, below Info) next to nothing, where a field in the logger's
// context (With) copied the server's logger into a new 500-byte buffer on
// every request.
func (sc *requestScope) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str("request_id", sc.id)
}

// scopeKey is the context key of the requestScope.
type scopeKey struct{}

func scopeOf(ctx context.Context) *requestScope {
	sc, _ := ctx.Value(scopeKey{}).(*requestScope)
	return sc
}

// RequestID returns the id of the request whose context ctx is, or "".
func RequestID(ctx context.Context) string {
	if sc := scopeOf(ctx); sc != nil {
		return sc.id
	}
	return ""
}

// maxRequestIDLen is the longest X-Request-ID honoured.
const maxRequestIDLen = 128

// validRequestID reports whether a client's X-Request-ID is 1–128 printable
// ASCII characters without spaces, safe to echo and to log.
func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// requestID honours a valid X-Request-ID or generates one, echoes it in the
// response and puts it, with a logger that carries it, into the context.
func (s *Server) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The header's canonical spelling, read and written straight: Get
		// and Set would canonicalize "X-Request-ID" anew on every request.
		var id string
		if vs := r.Header["X-Request-Id"]; len(vs) > 0 {
			id = vs[0]
		}
		if !validRequestID(id) {
			id = newRequestID()
		}
		w.Header()["X-Request-Id"] = []string{id}
		sc := &requestScope{id: id}
		logger := s.log.Hook(sc)
		ctx := context.WithValue(logger.WithContext(r.Context()), scopeKey{}, sc)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// statusWriter records the status and size of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
	// start is when the request began; parked: the handler parked the
	// request off net/http (park.go), which logs it when it answers.
	start  time.Time
	parked bool
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logRequests writes one access-log line per request.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, start: time.Now()}
		// Deferred so that a response aborted by a panic is logged too.
		defer func() {
			if !sw.parked {
				a := newAccessEntry(r, sw.start)
				s.logAccess(zerolog.Ctx(r.Context()), &a, sw.status, sw.bytes)
			}
		}()
		next.ServeHTTP(sw, r)
	})
}

// accessEntry is what a request's access-log line says of it besides its
// answer: taken from the request in net/http, and kept by a parked request
// (park.go) until it answers. Both paths write it with logAccess.
type accessEntry struct {
	method, route, remote string
	start                 time.Time
}

// newAccessEntry is r's entry, for a request that began at start.
func newAccessEntry(r *http.Request, start time.Time) accessEntry {
	a := accessEntry{method: clipMethod(r.Method), remote: r.RemoteAddr, start: start}
	if rctx := chi.RouteContext(r.Context()); rctx != nil {
		a.route = rctx.RoutePattern()
	}
	return a
}

// clipMethod bounds a method for the log: a client chooses it, and net/http
// accepts any token as long as the header limit (a 30 KB method once made
// 30 KB log lines).
func clipMethod(m string) string {
	const most = 24 // longer than any method RFC 9110 or WebDAV defines
	if len(m) > most {
		return m[:most] + "…"
	}
	return m
}

// logAccess writes a's access-log line and request metrics, for its
// answer's status (0 is 200) and bytes: the one access-log writer of both
// paths.
func (s *Server) logAccess(logger *zerolog.Logger, a *accessEntry, status int, bytes int64) {
	if status == 0 {
		status = http.StatusOK
	}
	took := time.Since(a.start)
	metricRoute := a.route
	if metricRoute == "" {
		metricRoute = "unmatched" // one series for every unknown path
	}
	s.cfg.Metrics.Request(metricRoute, a.method, status, took)
	logger.Info().
		Str("method", a.method).
		Str("route", a.route).
		Int("status", status).
		Int64("bytes", bytes).
		Float64("duration_ms", float64(took.Microseconds())/1000).
		Str("remote", a.remote).
		Msg("request")
}

// recoverPanics turns a panicking handler into a 500 internal problem; the
// panic and its stack go only to the log.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			if sw, ok := w.(*statusWriter); ok && sw.status != 0 {
				// Too late for a problem: log the panic and abort the
				// response, so the client sees it broken, not truncated.
				s.panics.Add(1)
				pe := &lock.PanicError{Value: v, Stack: debug.Stack()}
				zerolog.Ctx(r.Context()).Error().Err(pe).Str("stack", string(pe.Stack)).Msg("internal error")
				panic(http.ErrAbortHandler)
			}
			s.answerPanic(w, r, &lock.PanicError{Value: v, Stack: debug.Stack()})
		}()
		next.ServeHTTP(w, r)
	})
}

// answerPanic answers a request whose handling panicked with pe, a 500
// internal problem, and counts it: for a handler (recoverPanics) and for a
// parked wait (park.go) alike. Error logs the panic with its stack.
func (s *Server) answerPanic(w http.ResponseWriter, r *http.Request, pe *lock.PanicError) {
	s.panics.Add(1)
	Error(w, r, &lock.Error{Code: lock.CodeInternal, Detail: "handler panicked", Err: pe})
}

// waitEndFault, set by a test, makes the next waitEnded panic.
var waitEndFault atomic.Bool

// waitEnded records a wait's end, on either waiting path: the wait
// histogram, and a wait that panicked (lock.PanicError) as a panic.
// queryEnded is waitEnded for a blocking query, which the wait histogram
// (of acquires) does not time: a panic of its wait is counted.
func (s *Server) queryEnded(err error) {
	var pe *lock.PanicError
	if errors.As(err, &pe) {
		s.panics.Add(1)
	}
}

func (s *Server) waitEnded(start time.Time, err error) {
	if waitEndFault.CompareAndSwap(true, false) {
		panic("wait end fault")
	}
	s.cfg.Metrics.Wait(time.Since(start), waitOutcome(err))
	var pe *lock.PanicError
	if errors.As(err, &pe) {
		s.panics.Add(1)
	}
}
