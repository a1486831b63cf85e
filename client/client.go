package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/lockapi/lockapi/client/api"
)

// DefaultRequestTimeout bounds each request that does not wait for a lock;
// see WithRequestTimeout.
const DefaultRequestTimeout = 30 * time.Second

// Client talks to one lockapi server. It is safe for concurrent use.
type Client struct {
	api       *api.ClientWithResponses
	timeout   time.Duration
	lossWatch bool // watch held leases and sessions (WithoutLossWatch)
}

// Option configures a Client.
type Option func(*config)

type config struct {
	httpClient  *http.Client
	timeout     time.Duration
	apiKey      string
	noLossWatch bool
}

// WithHTTPClient makes the client send its requests with hc, for example to
// set TLS or a proxy. hc should have no Timeout: waiting acquires hold
// their request open for as long as they wait. The default is a fresh
// http.Client on http.DefaultTransport.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) { c.httpClient = hc }
}

// WithAPIKey sends key as a bearer token (Authorization: Bearer key) with
// every request, for a server configured with API keys.
func WithAPIKey(key string) Option {
	return func(c *config) { c.apiKey = key }
}

// WithRequestTimeout bounds each request the client sends (DefaultRequestTimeout
// unless set). A waiting acquire may take its wait on top of this.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout = d }
}

// DefaultURL is the server of FromEnv when LOCKAPI_URL is not set.
const DefaultURL = "http://localhost:8080"

// FromEnv returns a client configured as every lockapi client is: the
// server at $LOCKAPI_URL (DefaultURL if unset), with $LOCKAPI_API_KEY as
// its API key if set. opts apply after, and so override the key.
func FromEnv(opts ...Option) (*Client, error) {
	url := os.Getenv("LOCKAPI_URL")
	if url == "" {
		url = DefaultURL
	}
	if key := os.Getenv("LOCKAPI_API_KEY"); key != "" {
		opts = append([]Option{WithAPIKey(key)}, opts...)
	}
	return New(url, opts...)
}

// New returns a client of the lockapi server at baseURL, e.g.
// "http://localhost:8080".
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("lockapi: server URL %q: want http://host[:port] or https://host[:port]", baseURL)
	}
	cfg := config{httpClient: &http.Client{}, timeout: DefaultRequestTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.timeout <= 0 {
		cfg.timeout = DefaultRequestTimeout
	}
	apiOpts := []api.ClientOption{api.WithHTTPClient(cfg.httpClient)}
	if cfg.apiKey != "" {
		auth := "Bearer " + cfg.apiKey
		apiOpts = append(apiOpts, api.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", auth)
			return nil
		}))
	}
	a, err := api.NewClientWithResponses(strings.TrimSuffix(baseURL, "/"), apiOpts...)
	if err != nil {
		return nil, fmt.Errorf("lockapi: %w", err)
	}
	return &Client{api: a, timeout: cfg.timeout, lossWatch: !cfg.noLossWatch}, nil
}

// AcquireOptions tunes an acquire. Every field is optional.
type AcquireOptions struct {
	// Owner names the holder. The same owner acquiring a lock it holds is
	// reentrant: it gets the same lease (ID and token) with one more hold,
	// and each Release drops one. Empty means a fresh owner unique to this
	// acquire (host, process id and random bits), whose Release drops every
	// hold.
	Owner string
	// TTL is how long the lease lasts unless renewed; 0 is the server's
	// default (30s). The lease renews itself every TTL/3 while held.
	TTL time.Duration
	// Wait is how long to wait for the lock while another owner holds it,
	// or while it is closed for a lock-delay; 0 tries once. A wait longer than the server's maximum (60s by default)
	// takes several requests, and while waiting, failures worth retrying
	// (ErrUnavailable) are retried with backoff. Every request of one
	// Acquire carries the same Idempotency-Key, so a retry that finds a
	// grant whose answer was lost gets that grant back instead of a second
	// hold.
	Wait time.Duration
	// Metadata is kept with the lease and shown to anyone who looks at the
	// lock: at most 16 labels.
	Metadata map[string]string
	// Shared asks for a read lease: any number of shared leases hold the
	// lock together, and an exclusive one holds it alone. An owner that
	// holds a shared lease may not also take the lock exclusively (the
	// server refuses the upgrade with upgrade-refused).
	Shared bool
	// Limit, when positive, makes the name a semaphore with Limit permits
	// (1 to 10,000): each Acquire takes one permit. Every acquire of a held
	// semaphore must give the same limit (else limit-mismatch).
	Limit int
	// Fair waits in arrival order: while others queued first, the lock goes
	// to them. It matters only with Wait.
	Fair bool
	// Manual takes the lease without its watchdog, as redislock's Obtain
	// does: the caller renews it with Lease.Renew, more often than its TTL
	// (a third of it is what the watchdog does). Lost still closes when
	// the lease is lost: when Renew or Release learns it, or when no
	// renewal succeeded before the safety margin ahead of its expiry. A
	// lease bound to a session has no renewal of its own: Manual does not
	// apply to it.
	Manual bool
}

// body is the acquire request that opts describe.
func (opts AcquireOptions) body(owner string) api.AcquireRequest {
	body := api.AcquireRequest{Owner: &owner}
	if opts.TTL > 0 {
		ms := ceilMs(opts.TTL)
		body.TTLMs = &ms
	}
	if len(opts.Metadata) > 0 {
		md := api.Metadata(opts.Metadata)
		body.Metadata = &md
	}
	if opts.Shared {
		mode := api.LeaseModeShared
		body.Mode = &mode
	}
	if opts.Limit > 0 {
		limit := int32(min(opts.Limit, 1<<30))
		body.Limit = &limit
	}
	if opts.Fair {
		body.Fair = &opts.Fair
	}
	return body
}

// Acquire acquires the lock name and starts renewing it in the background
// (see Lease). When another owner still holds the lock after opts.Wait,
// the error is a *HeldError (IsHeld); when it is still closed for a
// lock-delay, a *LockDelayError (IsLockDelay). Other errors are a
// *ProblemError, a failure wrapping ErrUnavailable, or ctx's error.
func (c *Client) Acquire(ctx context.Context, name string, opts AcquireOptions) (*Lease, error) {
	return c.acquire(ctx, name, opts, nil)
}

// acquire is Acquire, of a lease bound to sess unless that is nil.
func (c *Client) acquire(ctx context.Context, name string, opts AcquireOptions, sess *Session) (*Lease, error) {
	owner, unique := opts.Owner, false
	if owner == "" {
		owner, unique = uniqueOwner(), true
	}
	body := opts.body(owner)
	sess.bind(&body.Session, &body.TTLMs)

	var deadline time.Time
	if opts.Wait > 0 {
		deadline = time.Now().Add(opts.Wait)
	}
	// One key for every request of this acquire: its retries are repeats.
	key := rand.Text()
	params := &api.AcquireLeaseParams{IdempotencyKey: &key}
	bo := newBackoff(100*time.Millisecond, 5*time.Second)
	for {
		wait, waitMs := remaining(deadline)
		body.WaitMs = waitMs
		rctx, cancel := context.WithTimeout(ctx, wait+c.timeout)
		sent := time.Now()
		resp, err := c.api.AcquireLeaseWithResponse(rctx, name, params, body)
		received := time.Now()
		cancel()

		var pause time.Duration
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, fmt.Errorf("lockapi: acquire %q: %w", name, context.Cause(ctx))
		case err != nil:
			err = unavailable(err)
		case resp.JSON201 != nil:
			return c.grant(ctx, resp.JSON201, unique, opts.Manual, wait > 0, sent, received, sess)
		case resp.JSON200 != nil:
			return c.grant(ctx, resp.JSON200, unique, opts.Manual, wait > 0, sent, received, sess)
		default:
			err = responseError(name, resp.HTTPResponse, resp.Body)
		}

		// Asked again only while the wait lasts: a lock still held after
		// the server's longest wait, or a failure that may pass.
		if opts.Wait <= 0 || time.Until(deadline) < time.Millisecond {
			return nil, err
		}
		var pe *ProblemError
		switch {
		case IsHeld(err), IsLockDelay(err):
			if received.Sub(sent) < 100*time.Millisecond {
				pause = bo.next() // the server hardly waited: do not spin
			}
		case errors.Is(err, ErrUnavailable):
			pause = bo.next()
			if errors.As(err, &pe) {
				pause = max(pause, pe.RetryAfter)
			}
		default:
			return nil, err
		}
		if pause > 0 && !sleepUntil(ctx, earliest(deadline, time.Now().Add(pause))) {
			return nil, fmt.Errorf("lockapi: acquire %q: %w", name, context.Cause(ctx))
		}
	}
}

// grant makes the lease of a granted acquire and starts its watchdog; a
// lease bound to sess has none of its own, and follows the session's.
func (c *Client) grant(ctx context.Context, g *api.Lease, unique, manual, waited bool, sent, received time.Time, sess *Session) (*Lease, error) {
	l := newLease(c, g, unique, sent)
	if sess != nil {
		l.bound, l.sess = true, sess
		close(l.lossDone) // the session's watch covers it
		sess.register(l)
		go l.follow(sess)
		return l, nil
	}

	// The lease can only be vouched for from when the request was sent. An
	// acquire that waited may have been granted long after that, so confirm
	// the grant with a renewal, which measures afresh. Until then the time
	// of the answer stands in, only to bound the confirmation's retries.
	if waited && received.Sub(sent) > l.TTL()/10 {
		l.renewedAt = received
		if err := keepAlive(ctx, l, c.timeout); err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), attemptTimeout(l.TTL(), c.timeout))
			_ = l.delete(rctx)
			cancel()
			return nil, fmt.Errorf("lockapi: acquire %q: granted after waiting, but the grant could not be confirmed: %w", l.name, err)
		}
	}
	if c.lossWatch {
		go l.watchHolders()
	} else {
		close(l.lossDone)
	}
	if manual {
		go l.expire()
		return l, nil
	}
	go watch(l.watchCtx, l, c.timeout, l.watchDone)
	return l, nil
}

// WithLock acquires the lock name, runs fn while holding it, and releases
// it, also when fn panics. fn's context is cancelled once the lease is
// known to be lost (Lease.Lost: within moments of a force release or an
// expiry while the loss watch runs, else at the next renewal), with the
// loss as its cause (context.Cause). The error joins fn's
// error and Release's, so errors.Is(err, ErrLeaseLost) reports a loss while
// fn ran.
func (c *Client) WithLock(ctx context.Context, name string, opts AcquireOptions, fn func(ctx context.Context, l *Lease) error) (err error) {
	l, err := c.Acquire(ctx, name, opts)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	finished := make(chan struct{})
	go func() {
		select {
		case <-l.Lost():
			cancel(l.Err())
		case <-finished:
		}
	}()
	defer func() {
		close(finished)
		cancel(nil)
		// Release even when ctx is done: that is when it matters most.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
		defer rcancel()
		if rerr := l.Release(rctx); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	return fn(fctx, l)
}

// remaining is what is left of an acquire's wait that ends at deadline (zero:
// no wait): the time, and the wait_ms to ask the server for (nil: try once).
func remaining(deadline time.Time) (time.Duration, *int64) {
	if deadline.IsZero() {
		return 0, nil
	}
	wait := time.Until(deadline)
	if ms := wait.Milliseconds(); ms > 0 {
		return wait, &ms
	}
	return wait, nil
}

// uniqueOwner returns an owner nobody else uses: host, process id and 48
// random bits.
func uniqueOwner() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown"
	}
	if len(host) > 64 {
		host = host[:64]
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%x", host, os.Getpid(), b)
}

// ceilMs converts d to whole milliseconds, rounding up.
func ceilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// sleepUntil waits until t and reports true, or false once ctx is done.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// AcquireAll acquires every lock in names, or none: the server takes them
// one at a time in one global order and never holds some while it waits for
// the others, so overlapping AcquireAll calls cannot deadlock. The leases
// come back in the order of names; each renews itself and is released on
// its own (Client.ReleaseAll releases them together). opts.Limit and opts.Fair do
// not apply to several locks at once.
//
// When a lock is still held after opts.Wait, the error is a *HeldError
// naming it (a *LockDelayError when it is closed for a lock-delay). Unlike Acquire, AcquireAll does not repeat a request whose
// answer was lost (a multi-lock takes no Idempotency-Key): it fails, and
// the server gives back whatever the lost answer granted when it notices,
// or the leases end with their TTL.
func (c *Client) AcquireAll(ctx context.Context, names []string, opts AcquireOptions) ([]*Lease, error) {
	return c.acquireAll(ctx, names, opts, nil)
}

// acquireAll is AcquireAll, of leases bound to sess unless that is nil.
func (c *Client) acquireAll(ctx context.Context, names []string, opts AcquireOptions, sess *Session) ([]*Lease, error) {
	if opts.Limit > 0 || opts.Fair {
		return nil, errors.New("lockapi: acquire all: Limit and Fair do not apply to a multi-lock")
	}
	owner, unique := opts.Owner, false
	if owner == "" {
		owner, unique = uniqueOwner(), true
	}
	one := opts.body(owner)
	body := api.MultiAcquireRequest{Locks: names, Owner: one.Owner, TTLMs: one.TTLMs, Metadata: one.Metadata, Mode: one.Mode}
	sess.bind(&body.Session, &body.TTLMs)
	what := strings.Join(names, ", ")

	var deadline time.Time
	if opts.Wait > 0 {
		deadline = time.Now().Add(opts.Wait)
	}
	bo := newBackoff(100*time.Millisecond, 5*time.Second)
	for {
		wait, waitMs := remaining(deadline)
		body.WaitMs = waitMs
		rctx, cancel := context.WithTimeout(ctx, wait+c.timeout)
		sent := time.Now()
		resp, err := c.api.AcquireLeasesWithResponse(rctx, body)
		received := time.Now()
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, fmt.Errorf("lockapi: acquire %s: %w", what, context.Cause(ctx))
		case err != nil:
			return nil, fmt.Errorf("lockapi: acquire %s: %w", what, unavailable(err))
		case resp.JSON201 != nil:
			return c.grantAll(ctx, resp.JSON201.Leases, unique, opts.Manual, wait > 0, sent, received, sess)
		}
		err = responseError(what, resp.HTTPResponse, resp.Body)
		if !(IsHeld(err) || IsLockDelay(err)) || opts.Wait <= 0 || time.Until(deadline) < time.Millisecond {
			return nil, err
		}
		if received.Sub(sent) < 100*time.Millisecond && !sleepUntil(ctx, earliest(deadline, time.Now().Add(bo.next()))) {
			return nil, fmt.Errorf("lockapi: acquire %s: %w", what, context.Cause(ctx))
		}
	}
}

// grantAll makes the leases of a granted multi-lock, all or none.
func (c *Client) grantAll(ctx context.Context, gs []api.Lease, unique, manual, waited bool, sent, received time.Time, sess *Session) ([]*Lease, error) {
	leases := make([]*Lease, 0, len(gs))
	for i := range gs {
		l, err := c.grant(ctx, &gs[i], unique, manual, waited, sent, received, sess)
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
			_ = c.ReleaseAll(rctx, leases)
			for _, g := range gs[i+1:] {
				_ = newLease(c, &g, unique, sent).delete(rctx)
			}
			cancel()
			return nil, err
		}
		leases = append(leases, l)
	}
	return leases, nil
}

// ReleaseAll releases leases (from AcquireAll, or any others) and returns
// their errors joined.
func (c *Client) ReleaseAll(ctx context.Context, leases []*Lease) error {
	var errs []error
	for _, l := range leases {
		errs = append(errs, l.Release(ctx))
	}
	return errors.Join(errs...)
}
