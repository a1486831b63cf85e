// Package client is the Go client of lockapi: it acquires locks, keeps
// their leases alive while they are held, and says when one is lost.
//
//	c, err := client.New("http://localhost:8080")
//	...
//	err = c.WithLock(ctx, "deploy:prod", client.AcquireOptions{TTL: 30 * time.Second, Wait: time.Minute},
//		func(ctx context.Context, l *client.Lease) error {
//			// ctx is cancelled once the lease is known to be lost.
//			return deploy(ctx, l.Token())
//		})
//	if client.IsHeld(err) { ... }
//
// Or, step by step:
//
//	l, err := c.Acquire(ctx, "deploy:prod", client.AcquireOptions{Owner: "ci-runner-1"})
//	...
//	defer l.Release(context.WithoutCancel(ctx))
//	select {
//	case <-l.Lost(): // stop the work: l.Err() says why
//	case <-work:
//	}
//
// A Lease renews itself every TTL/3 until Release. Renewals that fail in a
// way that may pass are retried, but only while the lease is surely still
// held; a 410 from the server, or no successful renewal before a safety
// margin ahead of the lease's expiry, closes Lost. Besides, a loss watch (a
// blocking query on the lock, one per lease; one per session for its bound
// leases) closes Lost within moments of a force release or an expiry,
// rather than at the next renewal; WithoutLossWatch turns it off. A watch
// that fails is retried and never makes a lease lost by itself. Holding a lock is never
// certain (a process can pause past its lease), so pass Lease.Token to the
// resources you guard and have them refuse tokens smaller than one they
// have seen.
//
// AcquireOptions.Manual takes a lease without its watchdog: the caller
// renews it with Lease.Renew. FromEnv configures a client from
// LOCKAPI_URL and LOCKAPI_API_KEY, as every lockapi client does.
// VerifyWebhook checks a webhook delivery and returns its event.
//
// Every operation of the API is a method of Client, on this package's own
// types: Inspect and Watch (a blocking query) read a lock's state, ListLocks
// and Locks list the held locks, ForceRelease ends a lock's leases;
// NewSession, GetSession, ListSessions and DeleteSession handle sessions;
// CreateWebhook, ListWebhooks, GetWebhook, DeleteWebhook, PingWebhook,
// ListDeadLetters and ReplayDeadLetter handle webhooks; Events streams the
// changes of locks; Campaign, Leader and Observe run leader elections on a
// lock (docs/ELECTIONS.md), and Lease.UpdateMetadata replaces a lease's
// metadata. The client generated from openapi.yaml (package
// client/api) is how this package speaks HTTP, and is no part of its API:
// it exists for the tests that hold the server to its contract.
package client
