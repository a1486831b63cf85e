package http

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"
)

// errKeyRevoked ends what a caller's key keeps open once the key is no
// longer in force.
var errKeyRevoked = errors.New("the API key was removed from the configuration or expired")

// whileKeyValid returns ctx, cancelled once c's key is no longer in force:
// removed by a reload of the keys (auth.Keyring.Replace), changed, or
// expired. An event stream runs under it, so a revoked key's streams close
// when the keys change, not when the client goes. On an open server it is
// ctx.
func (s *Server) whileKeyValid(ctx context.Context, c caller, log *zerolog.Logger) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := func() { cancel(nil) }
	if c.key == nil {
		return ctx, stop
	}
	keys := s.cfg.Keys
	go func() {
		var expiry <-chan time.Time
		if !c.key.Expires.IsZero() {
			t := time.NewTimer(time.Until(c.key.Expires))
			defer t.Stop()
			expiry = t.C
		}
		for {
			changed := keys.Changed() // before the check: no change is missed
			if !keys.Valid(c.key, time.Now()) {
				log.Info().Str("principal", c.principal).Msg("event stream closed: its API key is no longer in force")
				cancel(errKeyRevoked)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			case <-expiry:
				expiry = nil
			}
		}
	}()
	return ctx, stop
}
