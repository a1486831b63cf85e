package redisstate

import (
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// NewWithHealthEvery is New, except that the connection of Changes may stay
// silent for d before a PING.
func NewWithHealthEvery(rdb goredis.UniversalClient, prefix string, timeout, d time.Duration) *State {
	s := New(rdb, prefix, timeout)
	s.healthEvery = d
	return s
}
