package redis

import "github.com/lockapi/lockapi/internal/lock"

// Sessions implements lock.Store: nil, as the Redis store keeps no sessions
// yet (docs/SESSIONS.md has the design), and it refuses an acquire that
// names one: a half-built session must answer 501, never half-work.
func (s *Store) Sessions() lock.Sessions { return nil }

var errNoSessions = lock.Unsupported("sessions are not offered on Redis yet (docs/SESSIONS.md)")
