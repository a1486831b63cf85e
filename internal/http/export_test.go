package http

import "time"

// ParkedLen returns the number of requests parked off net/http.
func (s *Server) ParkedLen() int { return s.parked.Len() }

// AdvanceGaugeClock moves the clock of the cached gauges of s (such as
// lockapi_webhooks_blocked) by d.
func (s *Server) AdvanceGaugeClock(d time.Duration) {
	g := s.blockedGauge
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now
	g.now = func() time.Time { return now().Add(d) }
}

// FailNextGrantAnswer makes the next grant's answer panic as it is written.
func FailNextGrantAnswer() { grantAnswerFault.Store(true) }
