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
	// Result is Ok when every name's history is linearizable, Illegal when
	// one is not, and Unknown when the search of one ran out of time before
	// it decided (and none was Illegal): not a pass.
	Result porcupine.CheckResult
	// Undecided are the names whose search ran out of time, Illegal those
	// whose history no run of the model explains.
	Undecided, Illegal []Partition
	// Took is how long the check ran.
	Took time.Duration
	// Visualization is the path of porcupine's HTML visualization of the
	// Illegal names, written when there are some; "" when none could be
	// written.
	Visualization string
}

// Partition is one name's part of a history: the model checks each apart.
type Partition struct {
	Lock string
	// Ops is its operations; Unknown those whose outcome is unknown, each
	// of which the search may place, or not, at many points.
	Ops, Unknown int
}

func (p Partition) String() string {
	return fmt.Sprintf("%s (%d operations, %d of unknown outcome)", p.Lock, p.Ops, p.Unknown)
}

// Check checks ops against the model under promise p, each name's history
// apart and all at once, each within timeout (none when 0); so a Result
// says which names are not linearizable, or were not decided in time.
func Check(p Promise, ops []porcupine.Operation, timeout time.Duration) Result {
	start := time.Now()
	m := Model(p)
	parts := byLock(ops)
	results := make([]porcupine.CheckResult, len(parts))
	var wg sync.WaitGroup
	for i, part := range parts {
		wg.Go(func() { results[i] = porcupine.CheckOperationsTimeout(m, part, timeout) })
	}
	wg.Wait()
	var out Result
	var illegal []porcupine.Operation
	for i, part := range parts {
		switch results[i] {
		case porcupine.Illegal:
			out.Illegal = append(out.Illegal, partition(part))
			illegal = append(illegal, part...)
		case porcupine.Unknown:
			out.Undecided = append(out.Undecided, partition(part))
		}
	}
	out.Took = time.Since(start)
	switch {
	case len(out.Illegal) > 0:
		out.Result = porcupine.Illegal
		out.Visualization = visualize(m, illegal, timeout)
	case len(out.Undecided) > 0:
		out.Result = porcupine.Unknown
	default:
		out.Result = porcupine.Ok
	}
	return out
}

func partition(ops []porcupine.Operation) Partition {
	p := Partition{Lock: ops[0].Input.(Input).partition(), Ops: len(ops)}
	for _, op := range ops {
		if op.Output.(Output).Unknown {
			p.Unknown++
		}
	}
	return p
}

// visualize checks ops again, recording what porcupine's visualization
// shows, writes it to a temporary file and returns its path; "" when it
// could not be written.
func visualize(m porcupine.Model, ops []porcupine.Operation, timeout time.Duration) string {
	_, info := porcupine.CheckOperationsVerbose(m, ops, timeout)
	f, err := os.CreateTemp("", "lockapi-linearizability-*.html")
	if err != nil {
		return ""
	}
	defer f.Close()
	if porcupine.Visualize(m, info, f) != nil {
		return ""
	}
	return f.Name()
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
