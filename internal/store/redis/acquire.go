package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/lock"
)

// TryAcquire implements lock.Store with one script call.
func (s *Store) TryAcquire(ctx context.Context, req lock.AcquireRequest) (lock.Grant, error) {
	return s.AcquireAs(ctx, req, ulid.Make().String())
}

// AcquireAs is TryAcquire with the request id chosen by the caller: it names
// the acquire for Abandon, and a fresh grant's lease takes it as its id.
// Redlock (internal/store/redlock) gives every master the same one, so that
// a lease has one id everywhere.
func (s *Store) AcquireAs(ctx context.Context, req lock.AcquireRequest, requestID string) (lock.Grant, error) {
	if req.Session != "" && s.sessions == nil {
		return lock.Grant{}, errNoSessions
	}
	meta := ""
	if len(req.Metadata) > 0 {
		b, err := json.Marshal(req.Metadata)
		if err != nil {
			return lock.Grant{}, lock.AsError(err)
		}
		meta = string(b)
	}
	rec, err := s.journal.recordingFor(ctx, req.Lock)
	if err != nil {
		return lock.Grant{}, storeError(err)
	}
	if req.Session != "" && s.sessions.shadows != nil {
		// On Redis Cluster the name's master must hold a shadow of the
		// session first (clustersessions.go).
		if err := s.sessions.join(ctx, req.Session, req.Principal, rec); err != nil {
			return lock.Grant{}, err
		}
	}
	cmd, confirmed := s.acquire(ctx, req, requestID, meta, rec)
	if fresh, ok := cmd.Val().(string); ok && cmd.Err() == nil {
		// A fresh exclusive lease: "<token> <acquired ms>".
		g, err := freshGrant(req, requestID, fresh)
		if err == nil {
			rec.recorded()
		}
		return s.confirmGrant(ctx, req, g, confirmed, err)
	}
	res, err := cmd.Slice()
	if err != nil {
		if outcomeUnknown(err) {
			// It may have granted a lease that nobody will ever know of.
			s.reaper.add(req.Lock, requestID)
		}
		return lock.Grant{}, storeError(err)
	}
	r := reply(res)
	switch r.int(0) {
	case 0:
		return lock.Grant{}, lock.Held(req.Lock, lock.HeldBy{
			Owner:     r.str(1),
			Token:     r.uint(2),
			ExpiresIn: time.Duration(max(r.int(3), 0)) * time.Millisecond,
			Queue:     int(r.int(4)),
			Queued:    r.int(5) == 1,
			// The holder's own TTL: look again (3) may be the queue's.
			LeaseExpiresIn: time.Duration(max(r.int(6), 0)) * time.Millisecond,
		})
	case -1: // abandoned before it ran: its caller was told 503 already
		return lock.Grant{}, lock.Unavailable(errors.New("store: acquire ran after it was abandoned"))
	case -2:
		return lock.Grant{}, lock.LimitMismatch(req.Lock, req.Limit, int(r.int(1)))
	case -3:
		return lock.Grant{}, lock.UpgradeRefused(req.Lock, req.Owner)
	case -4:
		return lock.Grant{}, lock.LockDelayed(req.Lock, time.Duration(r.int(1))*time.Millisecond)
	case -5:
		return lock.Grant{}, lock.SessionNotFound(req.Session)
	case -6:
		return lock.Grant{}, lock.SessionLost(req.Session)
	}
	lease := r.lease(req.Lock, 2)
	lease.Mode, lease.Limit, lease.Session = lock.Mode(r.str(13)), int(r.int(14)), r.str(15)
	g := lock.Grant{Lease: lease, Fresh: r.int(1) == 1, RequestID: r.str(11), Replayed: r.int(12) == 1}
	if !g.Replayed {
		rec.recorded()
	}
	return s.confirmGrant(ctx, req, g, confirmed, r.err)
}

// confirmGrant returns a grant once enough replicas confirmed it (confirmed
// of req.MinReplicas), and undoes it otherwise. err is what reading the
// grant's reply met.
func (s *Store) confirmGrant(ctx context.Context, req lock.AcquireRequest, g lock.Grant, confirmed int, err error) (lock.Grant, error) {
	if err == nil && confirmed < req.MinReplicas {
		// A failover now could lose this grant and hand the lock to
		// someone else while its holder works. Undo it.
		_ = s.Abandon(ctx, req.Lock, g.RequestID)
		return lock.Grant{}, unconfirmed("grant", confirmed, req.MinReplicas, "it was released")
	}
	return g, err
}

// acquire runs the acquire script: the fast one when the request is a plain
// exclusive try that has not waited (see acquire_fast.lua), and the full one when the request
// is anything else or the fast script leaves it to the full one.
func (s *Store) acquire(ctx context.Context, req lock.AcquireRequest, requestID, meta string, rec *recording) (*goredis.Cmd, int) {
	if req.Mode != lock.Shared && req.Limit == 0 && !req.Fair && req.WaiterID == "" && req.IdempotencyKey == "" && req.Session == "" && req.Waited == 0 {
		cmd, confirmed := s.write(ctx, "acquire", s.scripts.acquireFast, s.acquireKeys(req.Lock), req.MinReplicas, rec,
			requestID, req.Owner, req.Principal, req.TTL.Milliseconds(), meta, s.channel(req.Lock), s.publish)
		if !fellBack(cmd) {
			return cmd, confirmed
		}
	}
	mode, fair := "x", "0"
	if req.Mode == lock.Shared {
		mode = "s"
	}
	if req.Fair {
		fair = "1"
	}
	return s.write(ctx, "acquire", s.scripts.acquire, s.keys(req.Lock), req.MinReplicas, rec,
		requestID, req.Owner, req.Principal, req.TTL.Milliseconds(), meta, s.channel(req.Lock), req.IdempotencyKey, s.publish,
		mode, req.Limit, fair, req.WaiterID, req.Session, req.Waited.Milliseconds())
}

// freshGrant is the grant of a fresh exclusive lease, which the scripts
// answer with "<token> <acquired ms>" only: the rest is as req asked.
func freshGrant(req lock.AcquireRequest, requestID, reply string) (lock.Grant, error) {
	tok, acq, _ := strings.Cut(reply, " ")
	token, err1 := strconv.ParseUint(tok, 10, 64)
	ms, err2 := strconv.ParseInt(acq, 10, 64)
	if err1 != nil || err2 != nil {
		return lock.Grant{}, &lock.Error{Code: lock.CodeInternal, Detail: "internal error",
			Err: fmt.Errorf("store: acquire reply %q is not a token and a time", reply)}
	}
	at := time.UnixMilli(ms).UTC()
	var md map[string]string
	if len(req.Metadata) > 0 {
		md = maps.Clone(req.Metadata)
	}
	return lock.Grant{
		Lease: lock.Lease{
			Lock: req.Lock, Mode: lock.Exclusive, ID: requestID, Owner: req.Owner, Principal: req.Principal,
			Token: token, HoldCount: 1, TTL: req.TTL, AcquiredAt: at, ExpiresAt: at.Add(req.TTL),
			Metadata: md,
		},
		Fresh:     true,
		RequestID: requestID,
	}, nil
}

// unconfirmed is the error of a write that fewer than n replicas confirmed.
func unconfirmed(what string, got, n int, then string) error {
	return &lock.Error{Code: lock.CodeUnavailable,
		Detail: fmt.Sprintf("replication did not confirm the %s: %d of %d replicas acknowledged it in time; %s", what, got, n, then)}
}

// Abandon implements lock.Store. A call whose outcome is unknown is handed
// to the reaper, which repeats it until Redis answers.
func (s *Store) Abandon(ctx context.Context, name, requestID string) error {
	_, err := s.reaper.abandon(ctx, name, requestID)
	if outcomeUnknown(err) {
		s.reaper.add(name, requestID)
	}
	if err != nil {
		return storeError(err)
	}
	return nil
}

// Leave implements lock.Store.
func (s *Store) Leave(ctx context.Context, name, waiterID string) error {
	if err := s.run(ctx, "leave", s.scripts.leave, s.keys(name), nil, waiterID, s.channel(name), s.publish).Err(); err != nil {
		return storeError(err)
	}
	return nil
}
