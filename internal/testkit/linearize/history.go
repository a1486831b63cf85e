package linearize

import (
	"os"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// History records operations from concurrent clients. Times are
// nanoseconds on the monotonic clock since the history began.
type History struct {
	start time.Time

	mu  sync.Mutex
	ops []porcupine.Operation
}

// NewHistory starts an empty history.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the time to record as an operation's call or return.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Add records one operation of client. An Unknown answer returns at
// Infinity, whatever ret says.
func (h *History) Add(client int, in Input, call int64, out Output, ret int64) {
	if out.Unknown {
		ret = Infinity
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

// Operations returns what was recorded so far.
func (h *History) Operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.ops...)
}

// Check checks the history against the model under promise p and fails tb
// when it is not linearizable, or when the checker ran out of timeout. On
// failure porcupine's visualization is written to a temporary file whose
// path is logged.
func (h *History) Check(tb testing.TB, p Promise, timeout time.Duration) {
	tb.Helper()
	ops := h.Operations()
	res := Check(p, ops, timeout)
	if res.Result == porcupine.Ok {
		return
	}
	tb.Errorf("%d operations: %s (not linearizable under %+v)", len(ops), res.Result, p)
	if res.Visualization != "" {
		tb.Errorf("porcupine's visualization: %s", res.Visualization)
	}
}

// Result is a check's outcome.
type Result struct {
	Result porcupine.CheckResult
	// Visualization is the path of porcupine's HTML visualization, written
	// when the result is not Ok; "" when it could not be written.
	Visualization string
}

// Check checks ops against the model under promise p.
func Check(p Promise, ops []porcupine.Operation, timeout time.Duration) Result {
	m := Model(p)
	res, info := porcupine.CheckOperationsVerbose(m, ops, timeout)
	out := Result{Result: res}
	if res == porcupine.Ok {
		return out
	}
	f, err := os.CreateTemp("", "lockapi-linearizability-*.html")
	if err != nil {
		return out
	}
	defer f.Close()
	if porcupine.Visualize(m, info, f) == nil {
		out.Visualization = f.Name()
	}
	return out
}
