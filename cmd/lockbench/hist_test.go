package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestHist_buckets checks that the buckets tile the value range: every value
// lies within its bucket, and each bucket starts where the previous ended.
func TestHist_buckets(t *testing.T) {
	for i := 1; i < histBuckets; i++ {
		_, prevHi := bucketBounds(i - 1)
		lo, hi := bucketBounds(i)
		if lo != prevHi+1 || hi < lo {
			t.Fatalf("bucket %d is [%d, %d], previous ends at %d", i, lo, hi, prevHi)
		}
		// Relative width stays within 1/128 above the exact range.
		if lo >= 2*histSub && float64(hi-lo+1)/float64(lo) > 1.0/histSub+1e-12 {
			t.Fatalf("bucket %d is [%d, %d]: wider than 1/%d of its values", i, lo, hi, histSub)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		v := rng.Uint64N(histMaxVal)
		v >>= rng.UintN(40) // every magnitude, not just the top one
		lo, hi := bucketBounds(bucketOf(v))
		if v < lo || v > hi {
			t.Fatalf("value %d in bucket %d = [%d, %d]", v, bucketOf(v), lo, hi)
		}
	}
	if got := bucketOf(math.MaxUint64); got != histBuckets-1 {
		t.Fatalf("a huge value lands in bucket %d, want the last (%d)", got, histBuckets-1)
	}
}

// TestHist_Quantile compares the histogram with exact nearest-rank
// percentiles of the same samples.
func TestHist_Quantile(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var h hist
	samples := make([]time.Duration, 200000)
	for i := range samples {
		// Log-normal around 400µs with a long tail, like request latencies.
		d := time.Duration(math.Exp(rng.NormFloat64()*1.2) * float64(400*time.Microsecond))
		samples[i] = d
		h.Record(d)
	}
	slices.Sort(samples)
	for _, q := range []float64{0, 0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1} {
		rank := max(int(math.Ceil(q*float64(len(samples)))), 1)
		want := samples[rank-1]
		got := h.Quantile(q)
		if rel := math.Abs(float64(got-want)) / float64(want); rel > 1.0/histSub {
			t.Errorf("q%v = %v, exact %v: off by %.2f%%", q, got, want, rel*100)
		}
	}
	if h.Count() != uint64(len(samples)) {
		t.Errorf("count %d, want %d", h.Count(), len(samples))
	}
	if h.Max() != samples[len(samples)-1] {
		t.Errorf("max %v, want %v", h.Max(), samples[len(samples)-1])
	}
	if got := h.Quantile(1); got != h.Max() {
		t.Errorf("q1 = %v, want the exact max %v", got, h.Max())
	}
}

func TestHist_small(t *testing.T) {
	var h hist
	if h.Quantile(0.5) != 0 || h.Mean() != 0 {
		t.Fatal("an empty histogram answers 0")
	}
	for _, d := range []time.Duration{100, 200, 300, 400} {
		h.Record(d)
	}
	h.Record(-5) // counts as 0
	for q, want := range map[float64]time.Duration{0.2: 0, 0.4: 100, 0.5: 200, 0.8: 300, 0.99: 400} {
		if got := h.Quantile(q); got != want {
			t.Errorf("q%v = %v, want %v (exact below 256 ns)", q, got, want)
		}
	}
	if h.Mean() != 200 {
		t.Errorf("mean %v, want 200ns", h.Mean())
	}
}

// TestHist_Merge checks that per-worker histograms add up to the histogram
// of all samples.
func TestHist_Merge(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var all, a, b, empty hist
	for i := range 10000 {
		d := time.Duration(rng.Int64N(int64(50 * time.Millisecond)))
		all.Record(d)
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	var m hist
	m.Merge(&empty)
	m.Merge(&a)
	m.Merge(&b)
	m.Merge(&empty)
	if m.counts != all.counts || m.n != all.n || m.min != all.min || m.max != all.max {
		t.Fatal("merged histogram differs from the histogram of all samples")
	}
	if math.Abs(m.sum-all.sum) > 1e-9*all.sum {
		t.Fatalf("merged sum %v, want %v", m.sum, all.sum)
	}
}
