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
//
// On Redis Cluster each master has a lane of its own (its queue and its
// workers): a pipeline then goes to one master, and no master's batches
// wait for another's. With one lane for all, a pipeline spans every
// master and waits for the slowest, and batchWorkers pipelines in flight
// for the whole cluster kept three masters at about 1.6 times one
// master's pairs/s (bench-rig, 16 cores).
type batcher struct {
	rdb     goredis.UniversalClient
	cluster *goredis.ClusterClient // nil off Cluster
	timeout time.Duration          // bounds one pipeline's round trip
	done    chan struct{}
	first   *lane // every call off Cluster; on Cluster, a call whose master is unknown

	// mu orders run against close: no call is queued once close began, so
	// the workers can answer every queued call before they stop. It also
	// guards masters.
	mu      sync.RWMutex
	closed  bool
	masters map[string]*lane // on Cluster, by master address
}

// lane is one queue of calls and the workers that send it.
type lane struct {
	b     *batcher
	calls chan *scriptCall
}

type scriptCall struct {
	script *script
	keys   []string
	args   []any
	cmd    *goredis.Cmd
	ready  chan struct{}
}

const (
	// batchWorkers is how many pipelines may be in flight at once, per
	// lane. Two keep one pipeline filling while the other is out, and a
	// slow one from holding up every call; four sent about twice as many
	// smaller pipelines through lockapi at c=32, and cost Redis about 10%
	// more CPU per acquire+release pair (lockbench, six alternating rounds).
	batchWorkers = 2
	// maxBatch caps one pipeline, so that one batch's latency stays small.
	maxBatch = 64
)

// newBatcher returns a batcher whose pipelines time out after timeout, the
// store's call deadline. Callers wait for their answer rather than their own
// context: a script that ran must be answered, or a grant would be lost.
// cluster is rdb's cluster client on Redis Cluster (rdb may wrap it), nil
// elsewhere.
func newBatcher(rdb goredis.UniversalClient, cluster *goredis.ClusterClient, timeout time.Duration) *batcher {
	b := &batcher{rdb: rdb, timeout: timeout, done: make(chan struct{})}
	if cluster != nil {
		b.cluster, b.masters = cluster, map[string]*lane{}
	}
	b.first = b.newLane()
	return b
}

// newLane starts a lane's workers.
func (b *batcher) newLane() *lane {
	l := &lane{b: b, calls: make(chan *scriptCall, 1024)}
	for range batchWorkers {
		go l.work()
	}
	return l
}

// run queues one script call and waits for its answer. ctx bounds only
// finding the call's lane (a slot map that must be loaded first): the call
// itself is answered whatever happens to ctx (newBatcher).
func (b *batcher) run(ctx context.Context, script *script, keys []string, args []any) *goredis.Cmd {
	c := &scriptCall{script: script, keys: keys, args: args, ready: make(chan struct{})}
	l := b.laneFor(ctx, keys)
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		c.fail()
		return c.cmd
	}
	l.calls <- c
	b.mu.RUnlock()
	<-c.ready
	return c.cmd
}

// laneFor returns the lane of the master that serves keys (a script's keys
// are all on one master), starting it on first use; off Cluster, or when
// the slot map cannot say, the first lane: the pipeline still reaches the
// right master, through the cluster client's own routing.
func (b *batcher) laneFor(ctx context.Context, keys []string) *lane {
	if b.cluster == nil || len(keys) == 0 {
		return b.first
	}
	node, err := b.cluster.MasterForKey(ctx, keys[0])
	if err != nil {
		return b.first
	}
	addr := node.Options().Addr
	b.mu.RLock()
	l := b.masters[addr]
	b.mu.RUnlock()
	if l != nil {
		return l
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if l = b.masters[addr]; l == nil && !b.closed {
		l = b.newLane()
		b.masters[addr] = l
	}
	if l == nil {
		return b.first
	}
	return l
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

func (l *lane) work() {
	batch := make([]*scriptCall, 0, maxBatch)
	for {
		select {
		case <-l.b.done:
			for {
				select {
				case c := <-l.calls:
					c.fail()
				default:
					return
				}
			}
		case c := <-l.calls:
			batch = append(batch[:0], c)
		}
	fill:
		for len(batch) < maxBatch {
			select {
			case c := <-l.calls:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		l.b.send(batch)
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
