package webhook

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/eventfeed"
	"github.com/lockapi/lockapi/internal/lock"
)

// Defaults of Config's zero fields.
const (
	DefaultRetryFor = 24 * time.Hour
	DefaultLeaseTTL = 10 * time.Second
	// DefaultRefresh is how often an instance reads the subscriptions
	// again in case it missed a State's notice of a change (Notifier): a
	// safety net, since each change is read when its notice arrives.
	DefaultRefresh = 5 * time.Minute
	// DefaultPollRefresh is the Refresh of a State that is no Notifier:
	// polling is then the only way to see other instances' changes.
	DefaultPollRefresh = 5 * time.Second
	// resolveTimeout bounds the look-up of a new subscription's host.
	resolveTimeout = 5 * time.Second
	// maxReplayLooks is how many workers may ask the State for their
	// replays at once (Service.replayLooks).
	maxReplayLooks = 4
)

// Config configures a Service. Zero fields get defaults.
type Config struct {
	// Store grants the leases that decide which instance delivers a
	// subscription; Log is its event log.
	Store lock.Store
	Log   lock.EventLog
	// Feed is the process's one reader of Log, which the workers share
	// with the event streams (cmd/lockapi makes it); nil: the Service
	// reads Log through a feed of its own.
	Feed  *eventfeed.Feed
	State State
	// File are the subscriptions of the webhooks file (LoadFile).
	File   []Subscription
	Policy Policy
	// Timeout bounds each attempt (DefaultTimeout).
	Timeout time.Duration
	// MaxDeliveries bounds the attempts in flight at once, over every
	// subscription, half of them to any one host (DefaultMaxDeliveries).
	MaxDeliveries int
	// RetryFor is how long after an event its delivery is retried before
	// it becomes a dead letter (DefaultRetryFor).
	RetryFor time.Duration
	// Backoff spaces the retries (DefaultBackoff).
	Backoff Backoff
	// LeaseTTL is the TTL of a worker's lease: how soon another instance
	// takes a subscription over from one that died (DefaultLeaseTTL).
	LeaseTTL time.Duration
	// Refresh is how often the list of subscriptions is read again even
	// though the State told of no change (DefaultRefresh; with a State
	// that is no Notifier, DefaultPollRefresh). It also bounds how long a
	// worker waits for events before it looks for replays that were
	// queued while a notice was lost.
	Refresh time.Duration
	// Owner names this instance in its leases; "" picks the host name
	// and a random suffix.
	Owner  string
	Logger zerolog.Logger
	// OnDelivery, when set, is told the outcome of every attempt and of
	// every event given up (metrics).
	OnDelivery func(Outcome)
}

// Service manages subscriptions and runs their delivery workers.
type Service struct {
	cfg    Config
	send   *sender
	log    zerolog.Logger
	byFile map[string]Subscription
	// feed is cfg.Feed, or the Service's own (ownFeed), closed by Run.
	feed    *eventfeed.Feed
	ownFeed bool

	// replayLooks bounds the workers' looks for replays in flight at once:
	// a State's notice wakes every worker, and a thousand of them asking
	// at once would take every pooled connection the acquires need.
	replayLooks chan struct{}

	mu      sync.Mutex
	workers map[string]*worker
	// refresh asks Run to read the subscriptions again now.
	refresh chan struct{}
}

// New returns a Service. Run starts its workers.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Log == nil || cfg.State == nil {
		return nil, errors.New("webhook: a Service needs a Store, its event Log and a State")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxDeliveries <= 0 {
		cfg.MaxDeliveries = DefaultMaxDeliveries
	}
	if cfg.RetryFor <= 0 {
		cfg.RetryFor = DefaultRetryFor
	}
	if cfg.Backoff.Min <= 0 {
		cfg.Backoff.Min = DefaultBackoff.Min
	}
	if cfg.Backoff.Max < cfg.Backoff.Min {
		cfg.Backoff.Max = max(DefaultBackoff.Max, cfg.Backoff.Min)
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
		if _, ok := cfg.State.(Notifier); !ok {
			cfg.Refresh = DefaultPollRefresh
		}
	}
	if cfg.Owner == "" {
		host, _ := os.Hostname()
		cfg.Owner = strings.Trim(host+"/"+hex.EncodeToString(randomBytes(4)), "/")
	}
	// The workers' acquires are checked here, once: a store takes them as
	// valid, and each worker tries again and again.
	if err := workerLease("x", cfg).Validate(); err != nil {
		return nil, fmt.Errorf("webhook: the workers' lease: %w", err)
	}
	s := &Service{
		cfg:     cfg,
		send:    newSender(cfg.Policy, cfg.Timeout, cfg.MaxDeliveries),
		log:     cfg.Logger,
		byFile:  map[string]Subscription{},
		workers: map[string]*worker{},
		refresh: make(chan struct{}, 1),

		replayLooks: make(chan struct{}, maxReplayLooks),
	}
	for _, sub := range cfg.File {
		s.byFile[sub.ID] = sub
	}
	s.feed = cfg.Feed
	if s.feed == nil {
		s.feed = eventfeed.New(cfg.Log, eventfeed.Options{Logger: cfg.Logger.With().Str("component", "webhook-events").Logger()})
		s.ownFeed = true
	}
	return s, nil
}

// Run runs a delivery worker for every subscription until ctx ends, and
// waits for them to stop; each releases its lease on the way out, so that
// another instance takes over at once.
//
// It reads the subscriptions when it starts, on each notice of a change
// from a State that is a Notifier, and otherwise every Refresh: while
// nothing changes it sends the State nothing more often than that.
func (s *Service) Run(ctx context.Context) {
	var changes <-chan struct{}
	if n, ok := s.cfg.State.(Notifier); ok {
		changes = n.Changes(ctx)
	}
	t := time.NewTimer(s.cfg.Refresh)
	defer t.Stop()
	for {
		s.reconcile(ctx)
		t.Reset(s.cfg.Refresh)
		select {
		case <-ctx.Done():
			s.mu.Lock()
			ws := slices.Collect(maps.Values(s.workers))
			s.workers = map[string]*worker{}
			s.mu.Unlock()
			for _, w := range ws {
				w.stop()
			}
			if s.ownFeed {
				s.feed.Close()
			}
			return
		case <-t.C:
			// Replays queued while a notice was lost.
			s.pokeWorkers()
		case <-s.refresh:
		case _, ok := <-changes:
			if !ok {
				changes = nil // ctx ended
				continue
			}
			// The change may be a replay queued on another instance:
			// the worker holding its subscription's lease delivers it
			// now rather than on its next look.
			s.pokeWorkers()
		}
	}
}

// pokeWorkers wakes every worker to look for replays.
func (s *Service) pokeWorkers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.workers {
		w.poke()
	}
}

// reconcile starts a worker for each subscription that has none and stops
// those whose subscription is gone.
func (s *Service) reconcile(ctx context.Context) {
	subs, err := s.List(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("webhooks: cannot read the subscriptions; workers keep running")
		}
		return
	}
	want := map[string]Subscription{}
	for _, sub := range subs {
		want[sub.ID] = sub
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	for id, w := range s.workers {
		if _, ok := want[id]; !ok {
			delete(s.workers, id)
			go w.stop()
		}
	}
	for id, sub := range want {
		if _, ok := s.workers[id]; !ok {
			s.workers[id] = startWorker(ctx, s, sub)
		}
	}
}

// poke asks Run to read the subscriptions now.
func (s *Service) poke() {
	select {
	case s.refresh <- struct{}{}:
	default:
	}
}

// Create adds a subscription and returns it with its generated secret,
// which is never shown again. Its worker starts with the next event.
func (s *Service) Create(ctx context.Context, spec Spec) (Subscription, error) {
	sub, err := s.cfg.Policy.Normalize("", spec)
	if err != nil {
		return Subscription{}, err
	}
	if !s.cfg.Policy.AllowPrivate {
		rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		_, err := s.cfg.Policy.Resolve(rctx, "ip", hostOf(sub.URL))
		cancel()
		if err != nil {
			return Subscription{}, lock.Invalid(lock.FieldError{Field: "url", Detail: err.Error()})
		}
	}
	key := sub.DedupeKey()
	for _, f := range s.cfg.File {
		if f.DedupeKey() == key {
			return Subscription{}, Exists(f.ID)
		}
	}
	sub.ID = NewID()
	sub.Secrets = []string{NewSecret()}
	sub.Source = SourceAPI
	sub.CreatedAt = time.Now().UTC()
	sub.Principal = spec.Principal
	cursor, err := s.cfg.Log.LastEventID(ctx)
	if err != nil {
		return Subscription{}, err
	}
	if err := s.cfg.State.Create(ctx, sub, cursor, spec.Quota); err != nil {
		return Subscription{}, err
	}
	s.poke()
	return sub, nil
}

// List returns every subscription, from the file and the State, oldest
// first.
func (s *Service) List(ctx context.Context) ([]Subscription, error) {
	stored, err := s.cfg.State.List(ctx)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(s.cfg.File)
	for _, sub := range stored {
		if _, ok := s.byFile[sub.ID]; !ok {
			out = append(out, sub)
		}
	}
	slices.SortStableFunc(out, func(a, b Subscription) int {
		// The file's first, in the file's order; then by age.
		if a.Source != b.Source {
			if a.Source == SourceFile {
				return -1
			}
			return 1
		}
		if a.Source == SourceFile {
			return 0
		}
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Get returns one subscription, or fails with CodeNotFound.
func (s *Service) Get(ctx context.Context, id string) (Subscription, error) {
	if sub, ok := s.byFile[id]; ok {
		return sub, nil
	}
	return s.cfg.State.Get(ctx, id)
}

// Delete removes a subscription created over the API; those of the file
// fail with CodeReadOnly.
func (s *Service) Delete(ctx context.Context, id string) error {
	if _, ok := s.byFile[id]; ok {
		return readOnly(id)
	}
	if err := s.cfg.State.Delete(ctx, id); err != nil {
		return err
	}
	s.poke()
	return nil
}

func readOnly(id string) *lock.Error {
	return &lock.Error{Code: CodeReadOnly, Detail: "webhook \"" + id + "\" comes from the webhooks file (LOCKAPI_WEBHOOKS_FILE); change it there"}
}

// Ping delivers a ping to the subscription now, once, from this instance,
// and says how it went, within the attempt timeout (Config.Timeout) from
// the call whatever the other webhooks do: pings have delivery slots of
// their own. The Attempt's Duration includes any wait for one.
func (s *Service) Ping(ctx context.Context, id string) (Attempt, Ping, error) {
	sub, err := s.Get(ctx, id)
	if err != nil {
		return Attempt{}, Ping{}, err
	}
	p := newPing(id, time.Now())
	a := s.send.send(ctx, sub, p.ID, encode(p), kindPing)
	s.observe(a.Outcome)
	return a, p, nil
}

// DeadLetters returns up to limit of a subscription's dead letters after
// the event id after, in event order.
func (s *Service) DeadLetters(ctx context.Context, id, after string, limit int) ([]DeadLetter, error) {
	if _, err := s.Get(ctx, id); err != nil {
		return nil, err
	}
	return s.cfg.State.DeadLetters(ctx, id, after, limit)
}

// Cursor returns the id of the last event a subscription is done with
// (delivered or dead-lettered), wherever its worker runs; ok is false when
// its delivery has not started. The dashboard shows it.
func (s *Service) Cursor(ctx context.Context, id string) (cursor string, ok bool, err error) {
	return s.cfg.State.Cursor(ctx, id)
}

// Replay queues a dead letter for delivery again: the subscription's
// worker, wherever it runs, delivers it before its next event, with a
// fresh retry period.
func (s *Service) Replay(ctx context.Context, id, eventID string) error {
	if _, err := s.Get(ctx, id); err != nil {
		return err
	}
	if err := s.cfg.State.Replay(ctx, id, eventID); err != nil {
		return err
	}
	s.mu.Lock()
	w := s.workers[id]
	s.mu.Unlock()
	if w != nil {
		w.poke()
	}
	return nil
}

// RetryBacklog counts the events this instance's workers are waiting to
// try again (at most one per subscription: each delivers in order).
func (s *Service) RetryBacklog() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, w := range s.workers {
		if w.retrying.Load() {
			n++
		}
	}
	return n
}

// OldestUndelivered is the age of the oldest event that this instance's
// workers read and have not delivered yet; 0 when they are caught up.
func (s *Service) OldestUndelivered() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var oldest time.Duration
	now := time.Now()
	for _, w := range s.workers {
		if at := w.head.Load(); at != 0 {
			oldest = max(oldest, now.Sub(time.Unix(0, at)))
		}
	}
	return oldest
}

func (s *Service) observe(o Outcome) {
	if s.cfg.OnDelivery != nil {
		s.cfg.OnDelivery(o)
	}
}

// hostOf returns the host of a URL that Normalize accepted.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Hostname()
}
