package redis

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/lock"
)

// listBatches is how many SCAN batches one page of List walks at most
// (Store.listBatches overrides it in tests).
const listBatches = 32

// List implements lock.Store with SCAN: a page holds the held (or closed)
// locks of as many SCAN batches as it takes to reach Limit, so it may hold a few more
// than Limit, and a lock that is acquired or released during the listing may
// or may not appear. A page walks at most listBatches batches: then it ends
// with what it found and the cursor where it stopped, so a page may be short
// or empty while it has a next cursor (for a caller whose Visible passes over
// most names, or a prefix few keys match). On Redis Cluster it walks every
// master in turn, in the order of the slots they serve; the cursor names the
// shard (by its first slot) and the cursor within it.
func (s *Store) List(ctx context.Context, req lock.ListRequest) (lock.ListPage, error) {
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	limit := req.Limit
	if limit <= 0 {
		limit = 100
	}
	shards, err := s.shards(ctx)
	if err != nil {
		s.noteFailure(err)
		return lock.ListPage{}, storeError(err)
	}
	shard, cursor, err := parseListCursor(req.Cursor, shards)
	if err != nil {
		return lock.ListPage{}, err
	}
	names, shard, cursor, err := s.scanNames(ctx, req, limit, shards, shard, cursor)
	if err != nil {
		return lock.ListPage{}, err
	}
	page := lock.ListPage{Locks: make([]lock.State, 0, len(names))}
	if shard < len(shards) {
		page.NextCursor = formatListCursor(shards, shard, cursor)
	}
	calls := make([]*scriptCall, len(names))
	for i, name := range names {
		rec, err := s.inspectRecording(ctx, name)
		if err != nil {
			return lock.ListPage{}, storeError(err)
		}
		calls[i] = &scriptCall{script: s.scripts.inspect, keys: s.keys(name), args: rec.append(nil)}
	}
	if len(calls) > 0 {
		runPipelined(ctx, s.rdb, calls)
	}
	for i, name := range names {
		res, err := calls[i].cmd.Slice()
		_, newer := unknownLeaseLayout(err)
		if err != nil && !newer {
			s.noteFailure(err)
			return lock.ListPage{}, storeError(err)
		}
		var st lock.State
		if err == nil {
			st, err = stateOf(name, reply(res))
			_, newer = unknownLeaseLayout(err)
		}
		if newer {
			// A newer instance's lock: told, and left out, as a listing
			// of webhooks leaves out theirs (docs/UPGRADING.md).
			s.noteLayout(err, s.lockKey(name))
			continue
		}
		if err != nil {
			return lock.ListPage{}, err
		}
		if st.Held || st.LockDelay > 0 { // it may have been released or expired since SCAN
			page.Locks = append(page.Locks, st)
		}
	}
	return page, nil
}

// scanNames walks shards from (shard, cursor) and returns the names of
// held or closed locks it found that req shows, and where it stopped: once it has
// limit names, or has run its budget of SCAN batches, or at the end.
//
// Where it stops tells nothing of the names req does not show: the MATCH
// pattern is made of req.Prefix alone, never of Visible, and SCAN's cursor
// moves by COUNT (made of limit alone) over the keyspace whatever MATCH
// keeps. So a page stops on its budget, after the same batches and on the
// same cursor, whether the names it walked were hidden or did not match;
// only the names it shows (which the caller sees anyway) can stop it
// sooner.
func (s *Store) scanNames(ctx context.Context, req lock.ListRequest, limit int, shards []shard, shard int, cursor uint64) ([]string, int, uint64, error) {
	// The exclusive lease ({name}:lock) or the shared leases and permits
	// ({name}:lock:shared, beside {name}:lock:expiry) exist while a name is
	// held, {name}:delay while it is closed for a lock-delay; the pattern
	// keeps these and drops the rest of a name's keys. A name found by two
	// of them (held both ways, a downgrade) may show up on two pages.
	match := s.prefix + "{" + req.Prefix + "*}:[ld][oe]*"
	budget := s.listBatches
	if budget <= 0 {
		budget = listBatches
	}
	var names []string
	seen := make(map[string]bool)
	for batch := 0; shard < len(shards) && batch < budget && len(names) < limit; batch++ {
		keys, next, err := shards[shard].client.Scan(ctx, cursor, match, int64(max(limit, 100))).Result()
		if err != nil {
			s.noteFailure(err)
			return nil, 0, 0, storeError(err)
		}
		for _, k := range keys {
			name, kind, _ := strings.Cut(strings.TrimPrefix(k, s.prefix+"{"), "}:")
			if (kind == "lock" || kind == "lock:shared" || kind == "delay") && lock.ValidName(name) && !seen[name] && req.Shows(name) {
				seen[name] = true
				names = append(names, name)
			}
		}
		cursor = next
		if cursor == 0 {
			shard++
		}
	}
	return names, shard, cursor, nil
}

// shard is one master to SCAN, named by the first slot it serves (0 outside
// a cluster).
type shard struct {
	firstSlot int
	client    goredis.Cmdable
}

// shards returns the masters to list, in slot order.
func (s *Store) shards(ctx context.Context) ([]shard, error) {
	if s.cluster == nil {
		return []shard{{client: s.rdb}}, nil
	}
	slots, err := s.cluster.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	first := map[string]int{} // master address -> its lowest slot
	for _, r := range slots {
		if len(r.Nodes) == 0 {
			continue
		}
		if f, ok := first[r.Nodes[0].Addr]; !ok || r.Start < f {
			first[r.Nodes[0].Addr] = r.Start
		}
	}
	var mu sync.Mutex
	var out []shard
	err = s.cluster.ForEachMaster(ctx, func(_ context.Context, c *goredis.Client) error {
		f, ok := first[c.Options().Addr]
		if !ok {
			return nil // serves no slot (yet)
		}
		mu.Lock()
		defer mu.Unlock()
		out = append(out, shard{firstSlot: f, client: c})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) != len(first) {
		return nil, errors.New("store: the client's view of the cluster's masters differs from CLUSTER SLOTS; try again")
	}
	slices.SortFunc(out, func(a, b shard) int { return a.firstSlot - b.firstSlot })
	return out, nil
}

// formatListCursor encodes where the next page starts: "<first slot of the
// shard>-<SCAN cursor>" in a cluster, the plain SCAN cursor otherwise.
func formatListCursor(shards []shard, i int, cursor uint64) string {
	c := strconv.FormatUint(cursor, 10)
	if len(shards) == 1 && shards[0].firstSlot == 0 {
		return c
	}
	return strconv.Itoa(shards[i].firstSlot) + "-" + c
}

// parseListCursor inverts formatListCursor. A shard that no longer starts at
// the cursor's slot (the cluster was resharded) resumes at the shard serving
// that slot now.
func parseListCursor(raw string, shards []shard) (int, uint64, error) {
	bad := lock.Invalid(lock.FieldError{Field: "cursor", Detail: "not a cursor returned by this server"})
	if raw == "" {
		return 0, 0, nil
	}
	slotPart, cursorPart, cut := strings.Cut(raw, "-")
	if !cut {
		slotPart, cursorPart = "0", raw
	}
	slot, err1 := strconv.Atoi(slotPart)
	cursor, err2 := strconv.ParseUint(cursorPart, 10, 64)
	if err1 != nil || err2 != nil || slot < 0 || slot > 16383 {
		return 0, 0, bad
	}
	i := 0
	for i+1 < len(shards) && shards[i+1].firstSlot <= slot {
		i++
	}
	if cursor == 0 && !cut {
		return 0, 0, bad // a plain SCAN cursor is never 0 mid-listing
	}
	return i, cursor, nil
}
