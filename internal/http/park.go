package http

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/lock"
)

// Parking: a long-poll acquire that must wait leaves net/http.
//
// A request parked in net/http holds its handler's goroutine (its stack
// grown to 16 KB by the request), net/http's background reader and 11 KB
// of buffers: about 41 KB a waiter (docs/BENCHMARKS.md). Once a waiting
// acquire on a plain-text HTTP/1.1 connection has made its tries and must
// sleep (lock.BeginWait), the handler hijacks the connection and returns:
// its goroutine, stack, buffers and request go. What stays is a
// parkedAcquire: the wait (lock.Waiting, which sleeps on callbacks and
// keeps no goroutine), the connection (watched for the client hanging up,
// watchClose) and what the answer and its access-log line need: about 2.4
// KB. The wait's answer is written to the connection as net/http would
// have written it, logged and counted as the middleware would have, and
// the connection goes back to the same http.Server (parkListener) for its
// next request. Close answers parked requests 503.
//
// A waiting multi-lock (POST /v1/leases, lock.BeginAll) parks the same
// way, and so does a blocking query of a lock (GET /v1/locks/{name} with
// index, lock.BeginWaitChange), under the limits of blocking queries. HTTP/2 streams, TLS connections, HTTP/1.0 and requests that close
// their connection wait in net/http as before, and so does a server run
// through Handler rather than Open (there is no listener to hand
// connections back to).

// parkWriteTimeout bounds writing a parked request's answer: a client that
// reads nothing must not hold the answering goroutine for good.
const parkWriteTimeout = 10 * time.Second

// canPark reports whether r may be parked off net/http when it must wait:
// plain-text HTTP/1.1 that keeps its connection, on a server opened with a
// parkListener. w must be logRequests's statusWriter, whose access-log line
// the parked request takes over.
func (s *Server) canPark(w http.ResponseWriter, r *http.Request) bool {
	if s.parkLn == nil || r.TLS != nil || r.ProtoMajor != 1 || r.ProtoMinor != 1 || r.Close {
		return false
	}
	_, ok := w.(*statusWriter)
	return ok
}

// acquireParking runs a waiting single acquire as acquiring and
// lock.AcquireWait do, parking the wait when it must sleep.
func (s *Server) acquireParking(w http.ResponseWriter, r *http.Request, c caller, req lock.AcquireRequest, wait time.Duration) {
	waitParking(s, s.waiters, w, r, c, func(ctx context.Context) (lock.Grant, parkableWait[lock.Grant], error) {
		g, wt, err := lock.BeginWait(ctx, s.store, req, wait)
		if wt == nil {
			return g, nil, err
		}
		return g, wt, err
	}, func(w http.ResponseWriter, r *http.Request, g lock.Grant, err error) {
		s.answerAcquire(w, r, req.Lock, g, err)
	}, func(g lock.Grant) []lock.Grant { return []lock.Grant{g} })
}

// acquireAllParking runs a waiting multi-lock as acquiring and
// lock.AcquireAll do, parking the wait when it must sleep.
func (s *Server) acquireAllParking(w http.ResponseWriter, r *http.Request, c caller, reqs []lock.AcquireRequest, wait time.Duration) {
	waitParking(s, s.waiters, w, r, c, func(ctx context.Context) ([]lock.Grant, parkableWait[[]lock.Grant], error) {
		grants, mwt, err := lock.BeginAll(ctx, s.store, reqs, wait)
		if mwt == nil {
			return grants, nil, err
		}
		return grants, mwt, err
	}, s.answerAcquireAll, func(grants []lock.Grant) []lock.Grant { return grants })
}

// parkableWait is a wait that made its tries and must sleep: a single
// acquire's *lock.Waiting, a multi-lock's *lock.MultiWaiting or a blocking
// query's *lock.ChangeWaiting.
type parkableWait[T any] interface {
	Park(ctx context.Context, answer func(T, error)) (wake func())
	Wait(ctx context.Context) (T, error)
}

// waitParking runs a waiting acquire under limits, as acquiring does:
// begin makes its tries up to the first sleep (its wait is nil when they
// settled it), and the wait is then parked off net/http, or waited here
// where the request cannot be parked. answer writes the outcome; grantsOf
// are the grants of a granted outcome, given back when the answer is known
// not to have reached the client (giveBack). A blocking query has no
// grantsOf: it grants nothing, and its wait is not an acquire's to time.
func waitParking[T any](s *Server, limits *waiterLimits, w http.ResponseWriter, r *http.Request, c caller,
	begin func(ctx context.Context) (T, parkableWait[T], error),
	answer func(w http.ResponseWriter, r *http.Request, v T, err error),
	grantsOf func(T) []lock.Grant) {
	leave, err := limits.enter(c.limitKey(r))
	if err != nil {
		Error(w, r, err)
		return
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	stop := context.AfterFunc(s.closing, func() { cancel(errShuttingDown) })
	parked := false
	defer func() {
		// Given back once more (each is idempotent), for a panic in
		// begin or Wait, which recoverPanics answers.
		if !parked {
			stop()
			cancel(nil)
			leave()
		}
	}()
	start := time.Now()
	v, wt, err := begin(ctx)
	if wt != nil {
		parkWait := func(p *parkedAcquire) func() {
			return wt.Park(p.ctx, func(v T, err error) {
				var grants func() []lock.Grant
				if grantsOf != nil {
					if err == nil {
						err = s.keyGone(&s.log, c, grantsOf(v))
					}
					grants = func() []lock.Grant { return grantsOf(v) }
				}
				p.answer(err, func(w http.ResponseWriter, r *http.Request, err error) {
					answer(w, r, v, err)
				}, grants)
			})
		}
		if parked = s.park(w, r, leave, start, parkWait); parked {
			stop()
			cancel(nil)
			return
		}
		v, err = wt.Wait(ctx) // not parked: wait here, as before
	}
	err = waitError(ctx, err)
	stop()
	cancel(nil)
	leave()
	if grantsOf == nil {
		s.queryEnded(err)
		answer(w, r, v, err)
		return
	}
	s.waitEnded(start, err)
	if err == nil {
		err = s.keyGone(zerolog.Ctx(r.Context()), c, grantsOf(v))
	}
	answer(w, r, v, err)
	if err == nil {
		s.deliverGrants(w, r, grantsOf(v))
	}
}

// parkedAcquire is a waiting acquire parked off net/http. It is kept small:
// every 100 bytes of it are 1 MB for 10,000 waiters.
type parkedAcquire struct {
	s *Server
	// leave gives back the waiter's place under the waiter limits;
	// waitStart is when the wait began, for the wait histogram.
	leave     func()
	waitStart time.Time

	conn net.Conn
	// pending are bytes of the client's next request, read with this one
	// or while it was parked: they are handed back with the connection.
	pending []byte
	// stopWatch ends the watch for the client leaving (watchClose).
	stopWatch func() []byte

	// ctx ends when the client leaves (context.Canceled) or the server
	// begins to close (errShuttingDown, from s.closing); wake tells the
	// parked wait so.
	ctx    context.Context
	cancel context.CancelCauseFunc
	wake   func()

	// What the answer and its access-log line need of the request. header
	// is nil when it held only X-Request-ID, as it does unless a
	// middleware sets more.
	header    http.Header
	requestID string
	path      string // escaped
	access    accessEntry
}

// park hijacks r's connection and parks a wait on it with parkWait, which
// parks the wait on p.ctx (lock.Waiting.Park, lock.MultiWaiting.Park) to
// call p.answer, and returns its wake; false when it cannot (the wait goes
// on in the handler).
func (s *Server) park(w http.ResponseWriter, r *http.Request, leave func(), waitStart time.Time, parkWait func(p *parkedAcquire) (wake func())) bool {
	sw := w.(*statusWriter) // canPark checked
	p := &parkedAcquire{
		s: s, leave: leave, waitStart: waitStart,
		requestID: RequestID(r.Context()), path: r.URL.EscapedPath(),
		access: newAccessEntry(r, sw.start),
	}
	if h := w.Header(); len(h) != 1 || h.Get("X-Request-ID") != p.requestID {
		p.header = h.Clone()
	}
	if !s.parked.add(p) {
		return false // the server is closing
	}
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		s.parked.remove(p)
		return false
	}
	sw.parked = true
	p.conn = conn
	if n := rw.Reader.Buffered(); n > 0 {
		p.pending = make([]byte, n)
		_, _ = rw.Reader.Read(p.pending)
	}
	p.ctx, p.cancel = context.WithCancelCause(s.closing)
	// Set before Park, which may answer at once.
	p.stopWatch = watchClose(conn, func() {
		p.cancel(context.Canceled)
		s.parked.wakeUp(p)
	})
	s.parked.setWake(p, parkWait(p))
	return true
}

// answer answers the parked request with the wait's answer: err, and what
// write writes as the handler would have (err as waitError explains it).
// It then hands the connection back, or gives back the grants (grants;
// nil for a blocking query) of an answer that did not reach the client. It runs on the wait's goroutine, not
// net/http's: a panic in write is answered 500 as recoverPanics answers a
// handler's, and a panic after it closes the connection, logged.
func (p *parkedAcquire) answer(err error, write func(w http.ResponseWriter, r *http.Request, err error), grants func() []lock.Grant) {
	defer p.s.parked.remove(p)
	// The request's logger, as requestID made it: kept as its id while
	// parked, which costs less.
	logger := p.s.log.With().Str("request_id", p.requestID).Logger()
	defer func() {
		if v := recover(); v != nil {
			p.s.panics.Add(1)
			logger.Error().Err(&lock.PanicError{Value: v}).Str("stack", string(debug.Stack())).Msg("internal error")
			p.leave() // again is harmless
			p.cancel(nil)
			if stop := p.stopWatch; stop != nil { // once: a second stop may block
				p.stopWatch = nil
				_ = recovered(func() { stop() })
			}
			_ = p.conn.Close()
		}
	}()
	err = waitError(p.ctx, err)
	p.leave()
	if grants == nil {
		p.s.queryEnded(err)
	} else {
		p.s.waitEnded(p.waitStart, err)
	}
	stop := p.stopWatch
	p.stopWatch = nil
	p.pending = append(p.pending, stop()...)

	u := &url.URL{Path: p.path, RawPath: p.path}
	if path, err := url.PathUnescape(p.path); err == nil {
		u.Path = path
	}
	r := (&http.Request{Method: p.access.method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, RemoteAddr: p.access.remote}).
		WithContext(logger.WithContext(p.ctx))
	resp := p.written(r, func(w http.ResponseWriter, r *http.Request) { write(w, r, err) })
	// The client hung up (the watch cancelled ctx), not the server.
	gone := p.ctx.Err() != nil && !errors.Is(context.Cause(p.ctx), errShuttingDown)
	p.cancel(nil)

	// Logged before the answer leaves, as the middleware logs a request
	// before net/http flushes its answer.
	p.s.logAccess(&logger, &p.access, resp.status, int64(resp.body.Len()))
	why := p.respond(resp)
	if why == nil && gone {
		why = errClientGone
	}
	if why != nil && err == nil && grants != nil {
		p.s.giveBack(&logger, grants(), why)
	}
}

// written is the answer write writes, or a 500 internal problem if write
// panics, as recoverPanics answers a handler that panics.
func (p *parkedAcquire) written(r *http.Request, write func(w http.ResponseWriter, r *http.Request)) *parkedResponse {
	resp := p.newResponse()
	if pe := recovered(func() { write(resp, r) }); pe != nil {
		resp = p.newResponse()
		p.s.answerPanic(resp, r, pe)
	}
	return resp
}

// newResponse is an empty answer to the parked request.
func (p *parkedAcquire) newResponse() *parkedResponse {
	resp := &parkedResponse{header: p.header.Clone()}
	if resp.header == nil {
		resp.header = http.Header{"X-Request-Id": {p.requestID}}
	}
	return resp
}

// respond writes resp to the connection and hands the connection back to
// the server, or closes it: when the client left, the server is closing or
// the write failed (the write's error).
func (p *parkedAcquire) respond(resp *parkedResponse) error {
	if resp.status == StatusClientClosedRequest {
		_ = p.conn.Close()
		return nil
	}
	closing := p.s.closing.Err() != nil
	_ = p.conn.SetWriteDeadline(time.Now().Add(parkWriteTimeout))
	_, err := p.conn.Write(resp.wire(closing))
	_ = p.conn.SetWriteDeadline(time.Time{})
	if err != nil || closing {
		_ = p.conn.Close()
		return err
	}
	// Answered: no longer parked while the connection waits for its next
	// request, as net/http's idle connections are not requests either.
	p.s.parked.remove(p)
	p.s.parkLn.handBack(p.conn, p.pending)
	return nil
}

// parkedResponse is a parked request's answer, written into memory by the
// handlers' own writers (answerAcquire, Error) and then to the connection.
type parkedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *parkedResponse) Header() http.Header { return w.header }

func (w *parkedResponse) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *parkedResponse) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}

// wire is the HTTP/1.1 response as net/http writes one whose handler wrote
// its whole body at once: with Date and Content-Length, and Connection:
// close when the server closes the connection after it.
func (w *parkedResponse) wire(closing bool) []byte {
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 ")
	b.WriteString(strconv.Itoa(w.status))
	b.WriteByte(' ')
	b.WriteString(http.StatusText(w.status))
	b.WriteString("\r\n")
	w.header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	w.header.Set("Content-Length", strconv.Itoa(w.body.Len()))
	if closing {
		w.header.Set("Connection", "close")
	}
	_ = w.header.Write(&b)
	b.WriteString("\r\n")
	b.Write(w.body.Bytes())
	return b.Bytes()
}

// parkedSet holds the parked requests, so that Close can wake them to
// answer 503 and wait for their answers: http.Server.Shutdown knows nothing
// of hijacked connections.
type parkedSet struct {
	mu     sync.Mutex
	closed bool
	m      map[*parkedAcquire]struct{}
	empty  chan struct{} // closed when closed and m is empty
}

// add counts p in; false once the server is closing.
func (ps *parkedSet) add(p *parkedAcquire) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		return false
	}
	if ps.m == nil {
		ps.m = make(map[*parkedAcquire]struct{})
	}
	ps.m[p] = struct{}{}
	return true
}

// setWake gives parked p its wake, which close calls.
func (ps *parkedSet) setWake(p *parkedAcquire, wake func()) {
	ps.mu.Lock()
	p.wake = wake
	ps.mu.Unlock()
	if p.ctx.Err() != nil {
		wake() // close or the client's leaving may have missed it
	}
}

// wakeUp wakes parked p, if it is parked yet (setWake wakes it else).
func (ps *parkedSet) wakeUp(p *parkedAcquire) {
	ps.mu.Lock()
	wake := p.wake
	ps.mu.Unlock()
	if wake != nil {
		wake()
	}
}

// remove counts p out, once answered; again is harmless.
func (ps *parkedSet) remove(p *parkedAcquire) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	delete(ps.m, p)
	if ps.closed && len(ps.m) == 0 && ps.empty != nil {
		close(ps.empty)
		ps.empty = nil
	}
}

// Len returns the number of parked requests.
func (ps *parkedSet) Len() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return len(ps.m)
}

// close refuses new parked requests, wakes the parked ones (the server's
// closing has ended their waits: they answer 503) and waits until they
// have answered or ctx is done.
func (ps *parkedSet) close(ctx context.Context) error {
	ps.mu.Lock()
	ps.closed = true
	wakes := make([]func(), 0, len(ps.m))
	for p := range ps.m {
		if p.wake != nil {
			wakes = append(wakes, p.wake)
		}
	}
	empty := make(chan struct{})
	if len(ps.m) == 0 {
		close(empty)
	} else {
		ps.empty = empty
	}
	ps.mu.Unlock()
	for _, wake := range wakes {
		wake()
	}
	select {
	case <-empty:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recovered runs f and returns its panic, if any.
func recovered(f func()) (pe *lock.PanicError) {
	defer func() {
		if v := recover(); v != nil {
			pe = &lock.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	f()
	return nil
}
