package http

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/lock"
)

// giveBackTimeout bounds the release of a grant whose answer was lost.
const giveBackTimeout = 5 * time.Second

// giveBack releases the grants of a waited acquire whose answer the server
// knows did not reach its client: the write failed, or the client had hung
// up by the time the answer was written. Nobody else could release them,
// and they would stay held until their TTL. Each is a normal store release
// of exactly that grant's hold, counted in lockapi_grants_returned_total.
// It is best-effort: an answer written into the kernel's buffer counts as
// delivered, and may yet never reach the client (docs/GUARANTEES.md).
// A replayed grant is left alone: the acquire it repeats has its own
// client.
func (s *Server) giveBack(logger *zerolog.Logger, grants []lock.Grant, why error) {
	for _, g := range grants {
		if g.Replayed || g.Lease.ID == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), giveBackTimeout)
		_, err := s.store.Release(ctx, lock.LeaseRef{Lock: g.Lease.Lock, ID: g.Lease.ID}, false)
		cancel()
		if err != nil {
			logger.Warn().Err(err).Str("lock", g.Lease.Lock).Str("lease_id", g.Lease.ID).AnErr("why", why).
				Msg("grant not delivered, and not given back: it stays until its TTL")
			continue
		}
		s.grantsReturned.Add(1)
		logger.Info().Str("lock", g.Lease.Lock).Str("lease_id", g.Lease.ID).AnErr("why", why).
			Msg("grant not delivered: given back")
	}
}

// giveBackOnPanic, deferred by an acquire's answer (answerAcquire,
// answerAcquireAll), gives back its grants (err nil) when writing the
// answer panics: the client is answered 500 (recoverPanics, or written on
// the parked path) and never learns its leases. The panic goes on, to be
// answered so.
func (s *Server) giveBackOnPanic(r *http.Request, grants []lock.Grant, err error) {
	v := recover()
	if v == nil {
		return
	}
	if err == nil {
		_ = recovered(func() { s.giveBack(zerolog.Ctx(r.Context()), grants, errAnswerPanicked) })
	}
	panic(v)
}

// errAnswerPanicked is why a grant is given back when writing its answer
// panicked.
var errAnswerPanicked = errors.New("the answer panicked: the client was answered 500")

// errClientGone is why a grant is given back when its client hung up
// before the answer was written.
var errClientGone = errors.New("the client hung up before the answer was written")

// deliverGrants is giveBack's check on the net/http waiting path, once a
// waited acquire has written its grants to w: the answer is flushed, and
// the grants given back if that fails or the client has gone.
func (s *Server) deliverGrants(w http.ResponseWriter, r *http.Request, grants []lock.Grant) {
	why := r.Context().Err()
	if why != nil {
		why = errClientGone
	} else {
		why = http.NewResponseController(w).Flush()
	}
	if why != nil {
		s.giveBack(zerolog.Ctx(r.Context()), grants, why)
	}
}
