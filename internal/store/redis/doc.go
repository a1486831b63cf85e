// Package redis implements lock.Store on Redis, the production store: hash
// locks driven by the Lua scripts in scripts/ (one library of Redis
// Functions on Redis 7, EVALSHA on 6.2: see runner.go), on a single Redis,
// a Sentinel-managed master or a Cluster. NewClient connects the way the store
// needs (no client retries, deadlines on the sockets) and New opens the store
// on that client. The conformance suite (internal/testkit/storetest) runs on
// all three topologies, as it does on the memory store.
//
// It trusts the requests it is given: an acquire was validated once, in
// the domain (lock.AcquireRequest.Validate, which the HTTP API calls), and
// neither the store nor its scripts check it again.
//
// The Store composes one small type per concern, each in its own file:
//
//	keyspace, scriptKeys   the names of a lock's keys and channel, and the keys a script takes (keys.go)
//	topology               how Redis is reached: one server, a Sentinel master or a Cluster (topology.go)
//	runner                 the scripts as one library, run within the call deadline, batched (runner.go, batch.go)
//	notifications          the pub/sub listener whose messages wake waiters (pubsub.go, shardsub.go)
//	journal                the event log, read, waited on and merged across masters (journal.go, eventlog.go, journalread.go, clusterjournal.go)
//	reaper                 the repairs in the background: ghost grants abandoned, expiries swept (reaper.go, sweep.go)
//	sessions               lock.Sessions, and the sweeper that ends due sessions (sessions.go; on
//	                       Cluster, the shadows that each master's sweeper ends, clustersessions.go)
//
// store.go holds Store, New, Ping and Close; the operations of lock.Store
// have a file each: acquire.go (acquire, abandon, leave), release.go (renew,
// release, force release), inspect.go (inspect, watch), list.go (SCAN over
// every shard, the list cursor). docs/ARCHITECTURE.md walks one acquire
// through them.
//
// Redis keys of one lock all carry the hash tag {name}, so that the scripts,
// which touch the lock hash and its fence hash together, run unchanged on
// Redis Cluster:
//
//	<prefix>{<name>}:lock       hash: the current lease, the last idempotency key, a mark per
//	                            re-entry and settled request (s:<id>), v (its layout,
//	                            layout.LeasesV1; none is the same); expires with it
//	<prefix>{<name>}:fence      hash: last token, last released lease, version, v (its
//	                            layout, as the lock hash's); never expires
//	<prefix>{<name>}:abandoned  set: request ids abandoned after an unknown outcome; expires
//	                            after abandonMemory
//	<prefix>{<name>}:unlock     pub/sub channel (sharded on Cluster): "r" when the lock became
//	                            free, "c:<ttl ms>" on a grant or renewal, "c" on other changes
//
// Shared leases, permits and the queue add keys of their own (scripts/lib.lua);
// each shared lease's or permit's record carries its layout too. A script
// refuses a lock whose records have a layout it does not know, and the
// store answers it unavailable and tells Options.UnknownLayout
// (leaselayout.go).
// While events are recorded (Options.Events; Store.Events hands out the
// journal that reads them, journal.go), there are two keys per Redis,
// outside any lock's hash tag:
//
//	<prefix>events              stream: the event log (docs/EVENTS.md), one entry per change,
//	                            written by the script that makes the change
//	<prefix>events:expiries     sorted set: every live lease, scored by its expiry, so that
//	                            the sweeper records expiries Redis makes silently; also the
//	                            pub/sub channel where a new earliest expiry is announced
//
// On Redis Cluster each master keeps its own pair, in a hash tag of its
// lowest slot ({#e<n>}, eventlog.go), written by the scripts of the names it
// serves; a read merges them into one log (clusterjournal.go).
//
// Sessions (docs/SESSIONS.md, sessions.go) add keys of their own, and a
// field 'sess' (the session id) in the lock hash or shared record of every
// bound lease, which then has no expiry of its own (lease_live in
// scripts/lib.lua reads the session's):
//
//	<prefix>{s:<id>}:session    hash: owner, principal, ttl, delay, exp (ms), due (its score
//	                            below), ended ('expired' or 'released'), v (its layout,
//	                            layout.SessionsV1; none is the same); no expiry while it
//	                            lives, remembered an hour once it ended (the 410)
//	<prefix>{s:<id>}:leases     hash: "<name>\n<lease id>" -> "<mode>\n<limit>\n<token>" of
//	                            every bound lease; deleted once the session's leases ended
//	<prefix>{<name>}:delay      string: the end of the name's lock-delay (ms); expires then
//	<prefix>sessions:expiries   sorted set: every session not yet swept, scored by its expiry
//	                            when last looked at; every instance's sweeper reads it, events
//	                            or not; also the pub/sub channel where an earliest one is announced
//
// On Redis Cluster (with events: clustersessions.go) the session's record
// has no expiries set: it lists the masters holding its leases ('masters',
// their logs' slots) and expires an hour after the session; each such
// master keeps a shadow of it in its log's hash tag, which the lock scripts
// read instead, and whose leases its sweeper ends:
//
//	<prefix>{#e<n>}:s:<id>         hash: the shadow: exp, ttl, delay, principal, ver (the
//	                               record's clock at its last write), due, ended
//	<prefix>{#e<n>}:s:<id>:leases  hash: the session's leases on this master, as above
//	<prefix>{#e<n>}:events:expiries  the shadow is a member (the session id), scored when due
//
// Callers import it as redisstore, since go-redis (imported here as goredis)
// owns the name redis.
package redis
