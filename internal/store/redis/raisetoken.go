package redis

import (
	"context"
	_ "embed"
	"strconv"
)

//go:embed scripts/raise.lua
var raiseLua string

// RaiseToken writes a Redlock grant's fencing token back to this store's
// Redis (internal/store/redlock): the name's token counter rises to token
// if it is lower, and the lease leaseID, wherever it is held here, takes
// token as its own. held reports whether the lease is held here.
func (s *Store) RaiseToken(ctx context.Context, name, leaseID string, token uint64) (held bool, err error) {
	n, err := s.run(ctx, "raise", s.scripts.raise, s.keys(name), nil, leaseID, strconv.FormatUint(token, 10)).Int64()
	if err != nil {
		return false, storeError(err)
	}
	return n == 1, nil
}
