package redis

import "strings"

// keyspace names a lock's Redis keys and channel. Every name carries the hash
// tag {name}, so that one lock's keys share a Redis Cluster slot.
type keyspace struct{ prefix string }

func (k keyspace) lockKey(name string) string      { return k.prefix + "{" + name + "}:lock" }
func (k keyspace) fenceKey(name string) string     { return k.prefix + "{" + name + "}:fence" }
func (k keyspace) abandonedKey(name string) string { return k.prefix + "{" + name + "}:abandoned" }
func (k keyspace) channel(name string) string      { return k.prefix + "{" + name + "}:unlock" }

// nameOfChannel inverts channel; ok is false for foreign channels.
func (k keyspace) nameOfChannel(ch string) (string, bool) {
	rest, ok := strings.CutPrefix(ch, k.prefix+"{")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "}:unlock")
}
