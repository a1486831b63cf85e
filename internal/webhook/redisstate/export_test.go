package redisstate

import "time"

// SetHealthEvery sets how long the connection of Changes may stay silent
// before a PING, until the test ends.
func SetHealthEvery(cleanup func(func()), d time.Duration) {
	old := healthEvery
	healthEvery = d
	cleanup(func() { healthEvery = old })
}
