package main

import (
	"math"
	"math/bits"
	"time"
)

// A hist is a log-linear latency histogram in the manner of HdrHistogram:
// values below 256 ns are counted exactly, and every power-of-two range above
// is split into 128 equal buckets, so any recorded value is known to within
// 1/128 (0.8%) of itself. It has a fixed size (35 KiB), records without
// allocating, and merges by adding counts, so each load worker keeps its own
// and they are summed once at the end: no locks or shared cache lines on the
// hot path, and no sorting of millions of samples.
//
// The zero value is an empty histogram ready to use. A hist is not safe for
// concurrent use.
type hist struct {
	counts   [histBuckets]uint64
	n        uint64
	sum      float64 // nanoseconds, for the mean
	min, max uint64
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits // buckets per power of two
	// histMaxLen is the bit length of the largest value kept apart: 2^41 ns
	// is about 36 minutes. Longer values land in the last bucket.
	histMaxLen  = 41
	histMaxExp  = histMaxLen - histSubBits - 1
	histBuckets = (histMaxExp + 2) * histSub
	histMaxVal  = 1<<histMaxLen - 1
)

// bucketOf maps a value to its bucket. Values below 2*histSub are their own
// bucket; above, v>>e keeps the top 8 bits (128..255), which with the
// exponent e gives a contiguous index.
func bucketOf(v uint64) int {
	if v < 2*histSub {
		return int(v)
	}
	if v > histMaxVal {
		v = histMaxVal
	}
	e := bits.Len64(v) - histSubBits - 1
	return e*histSub + int(v>>e)
}

// bucketBounds returns the smallest and largest value of bucket i.
func bucketBounds(i int) (lo, hi uint64) {
	if i < 2*histSub {
		return uint64(i), uint64(i)
	}
	e := i/histSub - 1
	m := uint64(i - e*histSub)
	return m << e, (m+1)<<e - 1
}

// Record adds one latency; negative latencies count as zero.
func (h *hist) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds o's samples to h.
func (h *hist) Merge(o *hist) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count returns the number of samples.
func (h *hist) Count() uint64 { return h.n }

// Max returns the largest sample, exactly.
func (h *hist) Max() time.Duration { return time.Duration(h.max) }

// Mean returns the average sample.
func (h *hist) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the value below or at which a fraction q (0..1) of the
// samples lie, by the nearest-rank definition: the sample of rank ceil(q*n).
// The answer is the middle of that sample's bucket, clamped to the exact
// minimum and maximum, so it is within 0.8% of the true sample.
func (h *hist) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketBounds(i)
			v := lo + (hi-lo)/2
			return time.Duration(min(max(v, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}
