package redis

import (
	"strings"
)

// keyspace names a lock's Redis keys and channel. Every name carries the hash
// tag {name}, so that one lock's keys share a Redis Cluster slot.
type keyspace struct{ prefix string }

func (k keyspace) lockKey(name string) string      { return k.prefix + "{" + name + "}:lock" }
func (k keyspace) fenceKey(name string) string     { return k.prefix + "{" + name + "}:fence" }
func (k keyspace) abandonedKey(name string) string { return k.prefix + "{" + name + "}:abandoned" }
func (k keyspace) channel(name string) string      { return k.prefix + "{" + name + "}:unlock" }

// Shared leases and permits, and the queue; see scripts/lib.lua.
func (k keyspace) sharedKey(name string) string   { return k.prefix + "{" + name + "}:lock:shared" }
func (k keyspace) expiryKey(name string) string   { return k.prefix + "{" + name + "}:lock:expiry" }
func (k keyspace) queueKey(name string) string    { return k.prefix + "{" + name + "}:queue" }
func (k keyspace) deadlineKey(name string) string { return k.prefix + "{" + name + "}:queue:deadline" }

// The event log and its lease expiries: one of each per Redis (no hash
// tag), used outside Redis Cluster only; see scripts/lib.lua. The expiries
// key's name is also the channel where an earliest expiry is announced.
func (k keyspace) eventsKey() string   { return k.prefix + "events" }
func (k keyspace) expiriesKey() string { return k.prefix + "events:expiries" }

// nameOfChannel inverts channel; ok is false for foreign channels.
func (k keyspace) nameOfChannel(ch string) (string, bool) {
	rest, ok := strings.CutPrefix(ch, k.prefix+"{")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "}:unlock")
}

// releaseSecretKey names the key, under the store's prefix, that holds the
// secret signing release URLs when none is configured. It has no hash tag:
// one key per Redis, and on Cluster any slot will do.
const releaseSecretKey = "release-secret"

// ReleaseSecretKey returns the key of the shared release-URL secret under
// prefix ("" is DefaultPrefix); auth.SharedReleaseSecret keeps it.
func ReleaseSecretKey(prefix string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return prefix + releaseSecretKey
}

// scriptKeys names the keys the scripts of a lock take: the lock's own,
// and the event log's while events are recorded outside Redis Cluster.
type scriptKeys struct {
	keyspace
	log *eventLog // a single Redis's event log; nil on a cluster or without events
}

// keys lists the keys every full script takes, in the order lib.lua names
// them: the event log and the expiries set only while events are recorded
// outside Redis Cluster.
func (k scriptKeys) keys(name string) []string {
	return k.withLog(k.lockKey(name), k.fenceKey(name), k.abandonedKey(name),
		k.sharedKey(name), k.expiryKey(name), k.queueKey(name), k.deadlineKey(name))
}

// acquireKeys and releaseKeys list the keys of the fast scripts
// (acquire_fast.lua, release_fast.lua).
func (k scriptKeys) acquireKeys(name string) []string {
	return k.withLog(k.lockKey(name), k.fenceKey(name), k.abandonedKey(name), k.expiryKey(name), k.queueKey(name))
}

func (k scriptKeys) releaseKeys(name string) []string {
	return k.withLog(k.lockKey(name), k.fenceKey(name), k.queueKey(name))
}

// withLog adds the event log and the expiries set to a script's keys while
// events are recorded outside Redis Cluster.
func (k scriptKeys) withLog(keys ...string) []string {
	if k.log != nil {
		keys = append(keys, k.log.key, k.log.exp)
	}
	return keys
}
