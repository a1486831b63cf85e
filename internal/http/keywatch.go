package http

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/lock"
)

// errKeyRevoked ends what a caller's key keeps open once the key is no
// longer in force.
var errKeyRevoked = errors.New("the API key was removed from the configuration or expired")

// errKeysRequired ends what an anonymous caller keeps open once a reload
// of the keys makes an open server one that needs a key.
var errKeysRequired = errors.New("the server now needs an API key")

// whileKeyValid returns ctx, cancelled once c's key is no longer in force:
// removed by a reload of the keys (auth.Keyring.Replace), changed, or
// expired. An event stream runs under it, so a revoked key's streams close
// when the keys change, not when the client goes. An anonymous caller's
// (on an open server) is cancelled once a reload configures keys: it
// would no longer be let in.
func (s *Server) whileKeyValid(ctx context.Context, c caller, log *zerolog.Logger) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := func() { cancel(nil) }
	keys := s.cfg.Keys
	if keys == nil {
		return ctx, stop // never reloaded: open for good
	}
	if c.key == nil {
		go whileOpen(ctx, cancel, keys, log)
		return ctx, stop
	}
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

// whileOpen cancels ctx once keys are configured in keys, which were none
// when an anonymous caller was let in.
func whileOpen(ctx context.Context, cancel context.CancelCauseFunc, keys *auth.Keyring, log *zerolog.Logger) {
	for {
		changed := keys.Changed() // before the check: no change is missed
		if keys.Len() != 0 {
			log.Info().Msg("event stream closed: the server now needs an API key")
			cancel(errKeysRequired)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
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
