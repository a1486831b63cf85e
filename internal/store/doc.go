// Package store implements lock.Store on Redis: hash locks driven by Lua
// scripts, the production store. The embedded default is
// internal/store/memory. One conformance suite, internal/store/storetest,
// runs every behaviour against both.
//
// Redis keys of one lock all carry the hash tag {name}, so that the scripts,
// which touch the lock hash and its fence hash together, run unchanged on
// Redis Cluster:
//
//	<prefix>{<name>}:lock    hash: the current lease; expires with it
//	<prefix>{<name>}:fence   hash: last token, last released lease, version; never expires
//	<prefix>{<name>}:unlock  pub/sub channel: "r" when the lock became free, "c:<ttl ms>" on a
//	                         grant or renewal, "c" on other changes
package store
