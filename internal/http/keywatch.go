package http

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/lock"
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

// keyGone is the check a waited grant passes before it is answered: the
// caller's key, checked once when the request arrived, may have been
// removed or may have expired while it waited. Then the grants are given
// back, as an undelivered answer's are (giveBack), and the error to answer
// instead is returned: 401, as authenticate answers a key no longer in
// force. It is nil on an open server, and while the key is in force.
func (s *Server) keyGone(logger *zerolog.Logger, c caller, grants []lock.Grant) error {
	if c.key == nil || s.cfg.Keys.Valid(c.key, time.Now()) {
		return nil
	}
	s.giveBack(logger, grants, errKeyRevoked)
	return &httpError{kindUnauthorized, errKeyRevoked.Error() + " while the acquire waited: its grant was given back"}
}
