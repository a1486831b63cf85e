package http

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/event"
	"github.com/lockapi/lockapi/internal/lock"
)

// writeJSON writes v as a JSON response with status.
func writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	h["X-Content-Type-Options"] = noSniff
	h["Cache-Control"] = noStore
	w.WriteHeader(status)
	var err error
	if a, ok := v.(jsonAppender); ok {
		err = writeAppended(w, a, v)
	} else {
		err = encodeJSON(w, v)
	}
	if err != nil {
		zerolog.Ctx(r.Context()).Debug().Err(err).Msg("write response")
	}
}

// answerBufs are writeAppended's buffers, reused across answers.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// writeAppended writes the JSON that a writes of itself, or, where it
// cannot, encodeJSON's of v (the same value).
func writeAppended(w io.Writer, a jsonAppender, v any) error {
	bp := answerBufs.Get().(*[]byte)
	defer answerBufs.Put(bp)
	b, ok := a.appendJSON((*bp)[:0])
	if cap(b) <= 16<<10 { // a rare large answer is not kept
		*bp = b[:0]
	}
	if !ok {
		return encodeJSON(w, v)
	}
	_, err := w.Write(b)
	return err
}

// The values of writeJSON's headers, set under their canonical names
// without Header.Set's canonicalizing and allocating on every answer.
// net/http only reads them; nothing may write into them.
var (
	contentTypeJSON = []string{"application/json"}
	noSniff         = []string{"nosniff"}
	noStore         = []string{"no-store"}
)

// encodeJSON writes v as one line of JSON without HTML escaping: the answers
// are application/json, never HTML, and a release_url's '&' written as
// \u0026 only puzzles whoever reads it. (U+2028 and U+2029 are still
// escaped, so a value stays on one line.)
func encodeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// marshalJSON is json.Marshal without HTML escaping (see encodeJSON).
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := encodeJSON(&b, v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Lease is the JSON form of lock.Lease.
type Lease struct {
	Lock         string            `json:"lock"`
	LeaseID      string            `json:"lease_id"`
	Owner        string            `json:"owner"`
	Mode         lock.Mode         `json:"mode"`
	Limit        int               `json:"limit"` // 0 for a lock
	FencingToken uint64            `json:"fencing_token"`
	HoldCount    int               `json:"hold_count"`
	TTLMs        int64             `json:"ttl_ms"`
	AcquiredAt   string            `json:"acquired_at"`
	ExpiresAt    string            `json:"expires_at"`
	Metadata     map[string]string `json:"metadata"`
	// ReleaseURL is a signed path that releases the lease with no API key.
	ReleaseURL string `json:"release_url"`
	// Session is the session the lease is bound to; absent for none.
	Session string `json:"session,omitempty"`
}

func (s *Server) newLease(l lock.Lease) Lease {
	return Lease{
		Lock:         l.Lock,
		LeaseID:      l.ID,
		Owner:        l.Owner,
		Mode:         mode(l.Mode),
		Limit:        l.Limit,
		FencingToken: l.Token,
		HoldCount:    l.HoldCount,
		TTLMs:        l.TTL.Milliseconds(),
		AcquiredAt:   event.FormatTime(l.AcquiredAt),
		ExpiresAt:    event.FormatTime(l.ExpiresAt),
		Metadata:     metadata(l.Metadata),
		ReleaseURL:   s.releaseURL(l),
		Session:      l.Session,
	}
}

// mode is never "" in JSON: a lease without a mode is exclusive.
func mode(m lock.Mode) lock.Mode {
	if m == "" {
		return lock.Exclusive
	}
	return m
}

// metadata is never null in JSON.
func metadata(md map[string]string) map[string]string {
	if md == nil {
		return map[string]string{}
	}
	return md
}

// ReleaseResult is the JSON form of lock.ReleaseResult.
type ReleaseResult struct {
	Lock      string `json:"lock"`
	LeaseID   string `json:"lease_id"`
	HoldCount int    `json:"hold_count"`
	Released  bool   `json:"released"`
}

// MultiLeases is the answer to POST /v1/leases: the leases in the order of
// the request's locks.
type MultiLeases struct {
	Leases []Lease `json:"leases"`
}

// MultiReleaseResult is the answer to DELETE /v1/leases: one item per id,
// in the order of the ids.
type MultiReleaseResult struct {
	Results []MultiReleaseItem `json:"results"`
}

// MultiReleaseItem is what became of one lease. Released is true when its
// holds are gone, by this release or an earlier one of it (a retry);
// otherwise Problem says why not.
type MultiReleaseItem struct {
	Lock     string   `json:"lock"`
	LeaseID  string   `json:"lease_id"`
	Released bool     `json:"released"`
	Problem  *Problem `json:"problem,omitempty"`
}

// Holder is the JSON form of lock.Holder: never the lease id.
type Holder struct {
	Owner        string            `json:"owner"`
	Mode         lock.Mode         `json:"mode"`
	FencingToken uint64            `json:"fencing_token"`
	HoldCount    int               `json:"hold_count"`
	AcquiredAt   string            `json:"acquired_at"`
	ExpiresAt    string            `json:"expires_at"`
	Metadata     map[string]string `json:"metadata"`
	// Session is the session the lease is bound to; absent for none.
	Session string `json:"session,omitempty"`
}

func newHolder(h lock.Holder) Holder {
	return Holder{
		Owner:        h.Owner,
		Mode:         mode(h.Mode),
		FencingToken: h.Token,
		HoldCount:    h.HoldCount,
		AcquiredAt:   event.FormatTime(h.AcquiredAt),
		ExpiresAt:    event.FormatTime(h.ExpiresAt),
		Metadata:     metadata(h.Metadata),
		Session:      h.Session,
	}
}

// LockState is the JSON form of lock.State. Mode and Holder are null when
// the lock is free, Holders is then empty; Holder is the exclusive lease
// only, as it was before shared leases and semaphores.
type LockState struct {
	Lock         string     `json:"lock"`
	Held         bool       `json:"held"`
	Mode         *lock.Kind `json:"mode"`
	Holder       *Holder    `json:"holder"`
	Holders      []Holder   `json:"holders"`
	Limit        int        `json:"limit"` // 0 for a lock
	QueueLength  int        `json:"queue_length"`
	FencingToken uint64     `json:"fencing_token"`
	// LockDelayRemainingMs is what is left of a lock-delay; absent for
	// none.
	LockDelayRemainingMs int64  `json:"lock_delay_remaining_ms,omitempty"`
	Index                string `json:"index"`
}

func newLockState(st lock.State) LockState {
	out := LockState{
		Lock:         st.Lock,
		Held:         st.Held,
		Holders:      make([]Holder, 0, len(st.Holders)),
		Limit:        st.Limit,
		QueueLength:  st.Queue,
		FencingToken: st.LastToken,
		Index:        st.Index,
	}
	if st.LockDelay > 0 {
		out.LockDelayRemainingMs = ceilMillis(st.LockDelay)
	}
	if st.Held && st.Kind != "" {
		out.Mode = &st.Kind
	}
	if st.Held && st.Holder != nil {
		h := newHolder(*st.Holder)
		out.Holder = &h
	}
	for _, h := range st.Holders {
		out.Holders = append(out.Holders, newHolder(h))
	}
	return out
}

// ceilMillis is d in whole milliseconds, rounded up: a delay that is left
// never shows as 0.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// LockList is one page of GET /v1/locks.
type LockList struct {
	Locks      []LockState `json:"locks"`
	NextCursor *string     `json:"next_cursor"`
}

// ForceReleaseResult is the answer to DELETE /v1/locks/{name}.
type ForceReleaseResult struct {
	Lock     string `json:"lock"`
	Released bool   `json:"released"`
}

// Status is the body of /healthz and /readyz.
type Status struct {
	Status string `json:"status"`
}
