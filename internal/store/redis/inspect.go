package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/lockapi/lockapi/internal/layout"
	"github.com/lockapi/lockapi/internal/lock"
)

// Inspect implements lock.Store.
func (s *Store) Inspect(ctx context.Context, name string) (lock.State, error) {
	rec, err := s.inspectRecording(ctx, name)
	if err != nil {
		return lock.State{}, storeError(err)
	}
	res, err := s.run(ctx, "inspect", s.scripts.inspect, s.keys(name), rec).Slice()
	if err != nil {
		return lock.State{}, storeError(err)
	}
	st, err := stateOf(name, reply(res))
	if _, ok := unknownLeaseLayout(err); ok {
		s.noteLayout(err, s.sharedKey(name))
		return lock.State{}, errLeaseLayout
	}
	return st, err
}

// inspectRecording is inspect.lua's events argument: on Redis Cluster the
// name's log, beside which its master keeps the sessions' shadows; none
// elsewhere.
func (s *Store) inspectRecording(ctx context.Context, name string) (*recording, error) {
	if !s.journal.clustered() {
		return nil, nil
	}
	return s.journal.recordingFor(ctx, name)
}

func stateOf(name string, r *replyReader) (lock.State, error) {
	st := lock.State{Lock: name, LastToken: r.uint(8), Limit: int(r.int(11)), Queue: int(r.int(12))}
	if r.str(0) != "" {
		st.Holder = &lock.Holder{
			Mode:       lock.Exclusive,
			Owner:      r.str(1),
			Principal:  r.str(2),
			Token:      r.uint(3),
			HoldCount:  int(r.int(4)),
			AcquiredAt: r.millis(5),
			ExpiresAt:  r.millis(6),
			ExpiresIn:  time.Duration(max(r.int(10), 0)) * time.Millisecond,
			Metadata:   r.metadata(7),
			Session:    r.str(14),
		}
		st.Holders = append(st.Holders, *st.Holder)
	}
	now := r.int(13)
	st.LockDelay = time.Duration(max(r.int(15), 0)) * time.Millisecond
	for i := 16; i < len(r.v); i++ {
		h, err := sharedHolder(r.str(i), now, st.Limit)
		if err != nil {
			return lock.State{}, err
		}
		st.Holders = append(st.Holders, h)
	}
	sort.Slice(st.Holders, func(i, j int) bool { return st.Holders[i].Token < st.Holders[j].Token })
	switch {
	case st.Holder != nil:
		st.Kind = lock.KindExclusive
	case len(st.Holders) > 0 && st.Limit > 0:
		st.Kind = lock.KindSemaphore
	case len(st.Holders) > 0:
		st.Kind = lock.KindShared
	}
	if st.Kind != lock.KindSemaphore {
		st.Limit = 0
	}
	st.Held = st.Kind != ""
	st.Index = lock.ComputeIndex(r.uint(9), st)
	return st, r.err
}

// record is a shared lease or permit as lib.lua keeps it; numbers are
// strings so that none loses precision on the way.
type record struct {
	Owner     string `json:"owner"`
	Principal string `json:"principal"`
	Token     string `json:"token"`
	Count     string `json:"count"`
	Acq       string `json:"acq"`
	Exp       string `json:"exp"`
	Meta      string `json:"meta"`
	Sess      string `json:"sess"`
	V         any    `json:"v"` // its layout (leaselayout.go)
}

// sharedHolder reads a record that inspect.lua returned; now is Redis's
// clock then, which times the expiry whatever the skew with ours.
func sharedHolder(raw string, now int64, limit int) (lock.Holder, error) {
	var rec record
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return lock.Holder{}, lock.AsError(fmt.Errorf("store: bad shared lease record: %w", err))
	}
	if v := fmt.Sprint(rec.V); rec.V != nil && v != layout.LeasesV1 {
		return lock.Holder{}, leaseLayout(v)
	}
	num := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	h := lock.Holder{
		Mode:       lock.Shared,
		Owner:      rec.Owner,
		Principal:  rec.Principal,
		Token:      uint64(num(rec.Token)),
		HoldCount:  int(num(rec.Count)),
		AcquiredAt: time.UnixMilli(num(rec.Acq)).UTC(),
		ExpiresAt:  time.UnixMilli(num(rec.Exp)).UTC(),
		ExpiresIn:  time.Duration(max(num(rec.Exp)-now, 0)) * time.Millisecond,
		Session:    rec.Sess,
	}
	if limit > 0 {
		h.Mode = lock.Exclusive
	}
	if rec.Meta != "" && rec.Meta != "{}" {
		if err := json.Unmarshal([]byte(rec.Meta), &h.Metadata); err != nil {
			return lock.Holder{}, lock.AsError(fmt.Errorf("store: bad shared lease metadata: %w", err))
		}
	}
	return h, nil
}

// Watch implements lock.Store: it returns once this process's pub/sub
// connection is subscribed to the lock's channel.
func (s *Store) Watch(ctx context.Context, name string, kind lock.WatchKind) (lock.Watcher, error) {
	w, err := s.hub.Watch(ctx, name, kind)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, lock.Unavailable(err)
	}
	return w, nil
}
