package redis

import (
	"context"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// batcher sends concurrent script calls to Redis together, in pipelines: a
// call that arrives while the connection is busy waits for the next batch
// instead of a round trip of its own. Under load that cuts the write and
// read system calls per script, on both sides, by the batch size; with no
// load a call goes out at once and costs what a plain EVALSHA costs.
//
// Each call is still one script, atomic on its own; a pipeline only shares
// the round trip. Nothing is retried, as with plain calls.
type batcher struct {
	rdb     goredis.UniversalClient
	timeout time.Duration // bounds one pipeline's round trip
	calls   chan *scriptCall
	done    chan struct{}

	// mu orders run against close: no call is queued once close began, so
	// the workers can answer every queued call before they stop.
	mu     sync.RWMutex
	closed bool
}

type scriptCall struct {
	script *script
	keys   []string
	args   []any
	cmd    *goredis.Cmd
	ready  chan struct{}
}

const (
	// batchWorkers is how many pipelines may be in flight at once. Two
	// keep one pipeline filling while the other is out, and a slow one
	// from holding up every call; four sent about twice as many smaller
	// pipelines through lockapi at c=32, and cost Redis about 10% more CPU
	// per acquire+release pair (lockbench, six alternating rounds).
	batchWorkers = 2
	// maxBatch caps one pipeline, so that one batch's latency stays small.
	maxBatch = 64
)

// newBatcher returns a batcher whose pipelines time out after timeout, the
// store's call deadline. Callers wait for their answer rather than their own
// context: a script that ran must be answered, or a grant would be lost.
func newBatcher(rdb goredis.UniversalClient, timeout time.Duration) *batcher {
	b := &batcher{rdb: rdb, timeout: timeout, calls: make(chan *scriptCall, 1024), done: make(chan struct{})}
	for range batchWorkers {
		go b.work()
	}
	return b
}

// run queues one script call and waits for its answer.
func (b *batcher) run(script *script, keys []string, args []any) *goredis.Cmd {
	c := &scriptCall{script: script, keys: keys, args: args, ready: make(chan struct{})}
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		c.fail()
		return c.cmd
	}
	b.calls <- c
	b.mu.RUnlock()
	<-c.ready
	return c.cmd
}

func (c *scriptCall) fail() {
	c.cmd = goredis.NewCmd(context.Background())
	c.cmd.SetErr(goredis.ErrClosed)
	close(c.ready)
}

func (b *batcher) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.done)
	}
}

func (b *batcher) work() {
	batch := make([]*scriptCall, 0, maxBatch)
	for {
		select {
		case <-b.done:
			for {
				select {
				case c := <-b.calls:
					c.fail()
				default:
					return
				}
			}
		case c := <-b.calls:
			batch = append(batch[:0], c)
		}
	fill:
		for len(batch) < maxBatch {
			select {
			case c := <-b.calls:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		b.send(batch)
	}
}

// send runs one batch, as one pipeline when it holds more than one call.
func (b *batcher) send(batch []*scriptCall) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	if len(batch) == 1 {
		c := batch[0]
		c.cmd = c.script.run(ctx, b.rdb, c.keys, c.args)
		close(c.ready)
		return
	}
	runPipelined(ctx, b.rdb, batch)
	for _, c := range batch {
		close(c.ready)
	}
}

// runPipelined runs calls as one pipeline (FCALLs, or EVALSHAs on a Redis
// without Functions) and sets each call's cmd. A call that Redis refused
// without running it (it lacks the library or the script: it restarted, or
// failed over; or it has no Functions) is run again on its own, which loads
// what is missing. Every cmd carries its own error.
func runPipelined(ctx context.Context, rdb goredis.UniversalClient, calls []*scriptCall) {
	pipe := rdb.Pipeline()
	for _, c := range calls {
		c.cmd = c.script.queue(ctx, pipe, c.keys, c.args)
	}
	_, _ = pipe.Exec(ctx)
	for _, c := range calls {
		_, again := c.script.lib.noted(c.cmd.Err())
		if again || isNoScript(c.cmd.Err()) {
			c.cmd = c.script.run(ctx, rdb, c.keys, c.args)
		}
	}
}
