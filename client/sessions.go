package client

import (
	"context"
	"net/http"
	"time"

	"github.com/lockapi/lockapi/client/api"
)

// SessionInfo is a session as the server has it (GET /v1/sessions/{id}).
type SessionInfo struct {
	ID        string
	Owner     string
	TTL       time.Duration
	LockDelay time.Duration
	// ExpiresAt is when the session, and every lease bound to it, ends
	// unless renewed, by the server's clock.
	ExpiresAt time.Time
	// Leases are the live leases bound to the session.
	Leases []SessionLease
}

// SessionLease is one live lease bound to a session.
type SessionLease struct {
	Lock    string
	LeaseID string
	Token   uint64
	Shared  bool
}

func newSessionInfo(s *api.Session) *SessionInfo {
	out := &SessionInfo{
		ID:        s.SessionID,
		Owner:     s.Owner,
		TTL:       time.Duration(s.TTLMs) * time.Millisecond,
		LockDelay: time.Duration(s.LockDelayMs) * time.Millisecond,
		ExpiresAt: s.ExpiresAt,
		Leases:    make([]SessionLease, 0, len(s.Leases)),
	}
	for _, l := range s.Leases {
		out.Leases = append(out.Leases, SessionLease{
			Lock: l.Lock, LeaseID: l.LeaseID, Token: uint64(l.FencingToken), Shared: l.Mode == api.LeaseModeShared,
		})
	}
	return out
}

// GetSession returns the session id, with its bound leases. A session that
// ended is a *ProblemError with Status 410 (session-lost), or 404 once the
// server has forgotten it.
func (c *Client) GetSession(ctx context.Context, id string) (*SessionInfo, error) {
	var s api.Session
	err := c.call(ctx, "get session "+id, "", 0, func(ctx context.Context) (*http.Response, error) {
		return c.api.GetSession(ctx, id, nil)
	}, http.StatusOK, &s)
	if err != nil {
		return nil, err
	}
	return newSessionInfo(&s), nil
}

// ListSessionsOptions selects the sessions of ListSessions. Every field is
// optional.
type ListSessionsOptions struct {
	// OwnerPrefix selects the sessions whose owners start with it.
	OwnerPrefix string
	// Limit is the most sessions listed; 0 is the server's default.
	Limit int
}

// ListSessions returns the live sessions the API key may see.
func (c *Client) ListSessions(ctx context.Context, opts ListSessionsOptions) ([]*SessionInfo, error) {
	params := &api.ListSessionsParams{}
	if opts.OwnerPrefix != "" {
		params.OwnerPrefix = &opts.OwnerPrefix
	}
	if opts.Limit > 0 {
		params.Limit = &opts.Limit
	}
	var list api.SessionList
	err := c.call(ctx, "list sessions", "", 0, func(ctx context.Context) (*http.Response, error) {
		return c.api.ListSessions(ctx, params)
	}, http.StatusOK, &list)
	if err != nil {
		return nil, err
	}
	out := make([]*SessionInfo, 0, len(list.Sessions))
	for i := range list.Sessions {
		out = append(out, newSessionInfo(&list.Sessions[i]))
	}
	return out, nil
}

// DeleteSession ends the session id, which need not be this process's
// (for an operator): every lease bound to it is released, and its holder
// learns it within moments (its loss watch) or at its next renewal. To end
// a Session of your own, use its Close, which also stops its watchdog.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	return c.call(ctx, "delete session "+id, "", 0, func(ctx context.Context) (*http.Response, error) {
		return c.api.DeleteSession(ctx, id)
	}, http.StatusOK, nil)
}

// Info returns the session as the server has it now (Client.GetSession).
func (s *Session) Info(ctx context.Context) (*SessionInfo, error) {
	return s.c.GetSession(ctx, s.id)
}
