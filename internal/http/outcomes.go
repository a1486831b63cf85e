package http

import (
	"sync/atomic"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/metrics"
)

// The handlers report what a request did to its locks as typed events, at
// the point where they learn it: no counter depends on a route's pattern or
// on a status code, so renaming a route or adding a 409 cannot silently
// move or zero one.

// grantAnswerFault, set by a test, makes the next grant's answer panic, as
// a fault while an acquire's answer is written would.
var grantAnswerFault atomic.Bool

// reportAcquire reports an acquire that granted grants, or failed with err:
// each grant by kind, or a conflict when another owner held a lock. A
// replayed grant was counted when it was made.
func (s *Server) reportAcquire(grants []lock.Grant, err error) {
	if err == nil && grantAnswerFault.CompareAndSwap(true, false) {
		panic("grant answer fault")
	}
	if err != nil {
		if lock.ErrorCode(err) == lock.CodeHeld {
			s.cfg.Metrics.Conflict()
		}
		return
	}
	for _, g := range grants {
		switch {
		case g.Replayed:
		case g.Fresh:
			s.cfg.Metrics.Grant(metrics.GrantFresh)
		default:
			s.cfg.Metrics.Grant(metrics.GrantReentrant)
		}
	}
}

// reportRelease reports a release of kind that answered res, or failed with
// err. A release answered again for a retry was counted the first time.
func (s *Server) reportRelease(kind metrics.ReleaseKind, res lock.ReleaseResult, err error) {
	if err == nil && !res.Retried {
		s.cfg.Metrics.Release(kind)
	}
	s.reportLeaseLost(err)
}

// reportLeaseLost reports a renew or release that failed with err, when err
// says its lease no longer held the lock.
func (s *Server) reportLeaseLost(err error) {
	if lock.ErrorCode(err) == lock.CodeLeaseLost {
		s.cfg.Metrics.LeaseLost()
	}
}
