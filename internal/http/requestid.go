package http

import (
	"encoding/binary"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
)

// lastRequestID is the (millisecond << 16 | sequence) of the newest request
// id made, which every newRequestID moves on by compare-and-swap.
var lastRequestID atomic.Uint64

// newRequestID makes a request id: a ULID whose order is the order the ids
// were made in, across the process, as ulid.Make's. ulid.Make takes a lock
// and reads its monotonic entropy under it for every id; here the order
// comes from one atomic (the millisecond, then a 16-bit sequence within
// it) and the rest of the entropy from math/rand/v2's per-thread
// generator. A process making more than 65,536 ids in a millisecond runs
// its ids' clock ahead until it is caught up with, rather than fail.
func newRequestID() string {
	now := uint64(time.Now().UnixMilli()) << 16
	var next uint64
	for {
		last := lastRequestID.Load()
		next = max(now, last+1)
		if lastRequestID.CompareAndSwap(last, next) {
			break
		}
	}
	var id ulid.ULID
	_ = id.SetTime(next >> 16) // a millisecond of this era fits in 48 bits
	binary.BigEndian.PutUint16(id[6:8], uint16(next))
	binary.BigEndian.PutUint64(id[8:], rand.Uint64())
	return id.String()
}
