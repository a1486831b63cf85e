package tests

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// Session-bound clients of the fault suite: half of the clients (those of
// faultRun.sessionBound) hold their leases through a session with no TTL
// of their own, and one heartbeat per session renews it (docs/SESSIONS.md).
// A run counts the sessions it lost (a session that answered 410
// session-lost, or 404 once a fault forgot it, before its client deleted
// it) and, for each, whether its holder was told (a 410 or 404 to its
// renewal, acquire or release) before another client was granted a lock
// the session held when it was lost.

// faultSession is one session of a session-bound client.
type faultSession struct {
	id     string
	client int
	done   chan struct{} // closed to stop the heartbeat
	hb     sync.WaitGroup

	mu       sync.Mutex
	open     map[string]grantRec // leases granted and not released (200), by id
	renewals int
	lost     bool
	told     time.Time // the first answer that said the session ended
	toldBy   string    // which request got that answer
}

// sessionBound says whether client i holds its leases through a session:
// the upper half, which takes locks of both instances as the lower half
// does, and with each hot lock one client of each half.
func (f *faultRun) sessionBound(i int) bool {
	return f.sessionTTL > 0 && i >= faultClients/2
}

// openSession creates client i's session on instance srv, retrying while
// lockapi or Redis is away, and starts its heartbeat; nil when stop came
// first.
func (f *faultRun) openSession(i, srv int, stop <-chan struct{}) *faultSession {
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		var created struct {
			ID string `json:"session_id"`
		}
		status, body, err := f.call(&srv, "POST", "/v1/sessions", map[string]any{"ttl_ms": f.sessionTTL.Milliseconds()})
		if err != nil || status >= 500 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if status != http.StatusCreated || json.Unmarshal(body, &created) != nil {
			f.t.Errorf("create session: %d %s", status, body)
			return nil
		}
		s := &faultSession{id: created.ID, client: i, done: make(chan struct{}), open: map[string]grantRec{}}
		f.mu.Lock()
		f.sessions = append(f.sessions, s)
		f.mu.Unlock()
		s.hb.Add(1)
		go f.heartbeat(s, srv)
		return s
	}
}

// heartbeat renews s every quarter of its TTL, through whichever instance
// answers (a refused connection moves it to the other), and again 50 ms
// after a renewal that failed; it stops when s ends or is closed.
func (f *faultRun) heartbeat(s *faultSession, srv int) {
	defer s.hb.Done()
	every := f.sessionTTL / 4
	wait := every
	for {
		select {
		case <-s.done:
			return
		case <-time.After(wait):
		}
		status, body, err := f.call(&srv, "POST", "/v1/sessions/"+s.id+"/renew", map[string]any{})
		switch {
		case err != nil || status >= 500:
			wait = 50 * time.Millisecond
		case status == http.StatusOK:
			s.mu.Lock()
			s.renewals++
			s.mu.Unlock()
			wait = every
		case status == http.StatusGone || status == http.StatusNotFound:
			s.tell(time.Now(), "renewal")
			return
		default:
			f.t.Errorf("renew session: %d %s", status, body)
			return
		}
	}
}

// closeSession stops s's heartbeat and deletes it, unless it was lost.
func (f *faultRun) closeSession(s *faultSession, srv int) {
	if s == nil {
		return
	}
	close(s.done)
	s.hb.Wait()
	deadline := time.Now().Add(faultMaxRun)
	for !s.ended() && time.Now().Before(deadline) {
		status, body, err := f.call(&srv, "DELETE", "/v1/sessions/"+s.id, nil)
		switch {
		case err != nil || status >= 500:
			time.Sleep(10 * time.Millisecond)
			continue
		case status == http.StatusGone || status == http.StatusNotFound:
			s.tell(time.Now(), "delete")
		case status != http.StatusOK:
			f.t.Errorf("delete session: %d %s", status, body)
		}
		return
	}
}

func (s *faultSession) granted(id string, g grantRec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open[id] = g
}

func (s *faultSession) released(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, id)
}

// tell records an answer that said s ended; the first one is when its
// holder was told.
func (s *faultSession) tell(at time.Time, by string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.lost {
		s.lost, s.told, s.toldBy = true, at, by
	}
}

func (s *faultSession) ended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// sessionCounts is what a run measured of its sessions.
type sessionCounts struct {
	sessions, renewals int
	lost               int
	// holding counts the lost sessions that held a lease when they were
	// lost, and toldFirst those of them whose holder was told before
	// another client was granted a lock the session held then.
	holding, toldFirst int
}

// measureSessions counts the run's sessions. f.mu is held.
func (f *faultRun) measureSessions() sessionCounts {
	var c sessionCounts
	for _, s := range f.sessions {
		s.mu.Lock()
		c.sessions++
		c.renewals += s.renewals
		if s.lost {
			c.lost++
			if len(s.open) > 0 {
				c.holding++
				if f.toldFirst(s) {
					c.toldFirst++
				}
			}
		}
		s.mu.Unlock()
	}
	return c
}

// toldFirst says whether s's holder was told that s ended before any
// other client was granted a lock s held then. f.mu and s.mu are held.
func (f *faultRun) toldFirst(s *faultSession) bool {
	for _, held := range s.open {
		for _, g := range f.grants {
			if g.lock == held.lock && g.client != s.client && g.recv.After(held.recv) && g.recv.Before(s.told) {
				return false
			}
		}
	}
	return true
}
