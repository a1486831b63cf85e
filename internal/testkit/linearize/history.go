package linearize

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
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

// AddFailed records one operation of client answered with an error that
// does not say whether it took effect (a 5xx): out is Unknown, as for an
// answer that never came, but whatever effect the operation had took place
// before ret, which stays its return time. That holds where nothing can
// run the request after the answer: lockapi never sends a store call again
// once it has answered it, and no Redis that a fault leaves running still
// has it in a buffer (a paused Redis would).
func (h *History) AddFailed(client int, in Input, call int64, out Output, ret int64) {
	out.Unknown = true
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

// Dump writes ops, one a line in order of call, to a temporary file and
// returns its path: a failing history in a form grep can read.
func Dump(ops []porcupine.Operation) string {
	ops = slices.Clone(ops)
	slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	f, err := os.CreateTemp("", "lockapi-history-*.txt")
	if err != nil {
		return ""
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	for _, op := range ops {
		ret := "inf"
		if op.Return != Infinity {
			ret = strconv.FormatInt(op.Return, 10)
		}
		fmt.Fprintf(w, "%d %s client %d: %s\n", op.Call, ret, op.ClientId, describe(op.Input, op.Output))
	}
	if w.Flush() != nil {
		return ""
	}
	return f.Name()
}
