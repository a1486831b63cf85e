package redisstate

import (
	"context"
	"errors"
	"net"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// changed tells the instances subscribed to Changes that the subscription
// id changed. The change is made: a notice that cannot be sent is made up
// for by their next periodic read, so its failure is no error.
func (s *State) changed(ctx context.Context, id string) {
	_ = s.rdb.Publish(ctx, s.channel(), id).Err()
}

// Changes subscribes to the notices that any instance's State sends on
// changes (see the package doc). While nothing changes it sends nothing
// but a PING every 5 minutes.
func (s *State) Changes(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	notify := func() {
		select {
		case out <- struct{}{}:
		default: // one is pending already
		}
	}
	go func() {
		defer close(out)
		wait := resubscribeMin
		for ctx.Err() == nil {
			if s.listen(ctx, notify) {
				wait = resubscribeMin
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			wait = min(2*wait, resubscribeMax)
		}
	}()
	return out
}

// listen subscribes to the notices on a connection of its own and tells
// of each, and of the subscription, until ctx ends or the connection
// fails; subscribed says whether the subscription was confirmed.
func (s *State) listen(ctx context.Context, notify func()) (subscribed bool) {
	ps := s.rdb.Subscribe(ctx, s.channel())
	// A receive does not end with ctx: closing the connection ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() {
		stop()
		_ = ps.Close()
	}()
	pinged := false
	for {
		wait := s.healthEvery
		if pinged {
			wait = s.timeout
		}
		msg, err := ps.ReceiveTimeout(ctx, wait)
		if ctx.Err() != nil {
			return subscribed
		}
		var ne net.Error
		switch {
		case err == nil:
			switch msg.(type) {
			case *goredis.Subscription:
				// Subscribed, or subscribed again after go-redis
				// reconnected: changes may have been missed meanwhile.
				subscribed = true
				notify()
			case *goredis.Message:
				notify()
			}
			pinged = false
		case errors.As(err, &ne) && ne.Timeout() && !pinged:
			if ps.Ping(ctx) != nil {
				return subscribed
			}
			pinged = true
		default:
			// Failed, or no answer to the PING: a fresh connection.
			return subscribed
		}
	}
}
