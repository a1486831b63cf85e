package lock

import (
	"encoding/binary"
	"hash/fnv"
	"strconv"
)

// ComputeIndex derives a State's Index from a version that the store bumps on
// every change it makes, plus the state itself: expiry frees a lock, and
// the end of a lock-delay opens it, without any store write, and must
// change the index too.
func ComputeIndex(version uint64, s State) string {
	h := fnv.New64a()
	var b [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	put(version)
	put(s.LastToken)
	put(uint64(s.Queue))
	for _, hd := range s.Holders {
		put(hd.Token)
		put(uint64(hd.HoldCount))
		put(uint64(hd.ExpiresAt.UnixMilli()))
	}
	if s.LockDelay > 0 {
		// The delay's end opens the name without any store write.
		put(1)
	}
	return strconv.FormatUint(h.Sum64(), 36)
}
