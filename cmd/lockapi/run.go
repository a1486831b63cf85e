package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockapi/lockapi/client"
)

// signalFromTerminal reports whether a SIGINT came from the terminal, and
// so reached the command too; a variable so that tests can pretend either.
var signalFromTerminal = inTerminalForeground

// releaseTimeout bounds the release after the command has exited.
const releaseTimeout = 10 * time.Second

const runUsage = `usage: lockapi run [flags] NAME [--] COMMAND [ARG...]

Runs COMMAND while holding the lock NAME, like flock(1) for many machines.
It acquires the lock (waiting up to --wait), runs the command with
LOCKAPI_LOCK, LOCKAPI_LEASE_ID and LOCKAPI_FENCING_TOKEN added to its
environment, renews the lease in the background, and releases it when the
command exits. SIGINT and SIGTERM are passed on to the command (except a
Ctrl-C in a terminal, which reaches the command by itself).

If the lease is lost while the command runs (force-released or expired,
seen within moments by a watch of the lock; or the server could not be
reached to renew it), the command gets SIGTERM, then SIGKILL after
--grace, and lockapi run exits 70. Give the fencing token to whatever
the command writes to, so that a late write is refused.

Flags:
  --server URL   lockapi server (default $LOCKAPI_URL, else http://localhost:8080)
  --ttl D        lease TTL; renewed every TTL/3 (default 30s)
  --wait D       how long to wait for a held lock (or through a lock-delay);
                 0 tries once (default 5m)
  --owner NAME   owner of the lease (default: unique, host:pid:random); runs
                 with the same owner are reentrant: they do not exclude each other
  --grace D      time between SIGTERM and SIGKILL when the lease is lost (default 10s)
  --shared       take a read lease: runs with --shared hold the lock together,
                 a run without it holds it alone
  --limit N      treat NAME as a semaphore of N permits (1-10000): up to N runs
                 at once; every run on NAME must give the same N
  --fair         wait in arrival order: runs that queued first go first

$LOCKAPI_API_KEY, when set, is sent as the bearer token.

Exit status: the command's own (128+N if it was killed by signal N), or
    2  usage error, or the server refused the input (400, or a 409 that
       waiting cannot mend: limit-mismatch, upgrade-refused)
   69  the server was unavailable or failed
   70  the lease was lost while the command ran
   75  the lock was still held by someone else, or still closed for a
       lock-delay (docs/SESSIONS.md), after --wait
   77  the server refused the API key (401, 403)
  126  the command could not be started
  127  the command was not found
`

type runConfig struct {
	server  string
	ttl     time.Duration
	wait    time.Duration
	owner   string
	grace   time.Duration
	shared  bool
	limit   int
	fair    bool
	name    string
	command []string
}

func parseRunFlags(args []string, stderr io.Writer) (runConfig, error) {
	var c runConfig
	f := newFlags("run")
	f.bind("server", stringValue(&c.server, defaultServer(stderr)))
	f.bind("ttl", durationValue(&c.ttl, 30*time.Second, positive))
	f.bind("wait", durationValue(&c.wait, 5*time.Minute, notNegative))
	f.bind("owner", stringValue(&c.owner, ""))
	f.bind("grace", durationValue(&c.grace, 10*time.Second, notNegative))
	f.fs.BoolVar(&c.shared, "shared", false, "")
	f.bind("limit", limitValue(&c.limit))
	f.fs.BoolVar(&c.fair, "fair", false, "")
	if err := f.parse(args); err != nil {
		return c, err
	}
	if f.fs.NArg() == 0 {
		return c, errors.New("missing the lock NAME")
	}
	c.name, c.command = f.fs.Arg(0), f.fs.Args()[1:]
	switch {
	case len(c.command) > 0 && c.command[0] == "--":
		c.command = c.command[1:]
	case len(c.command) > 0 && strings.HasPrefix(c.command[0], "-"):
		// Flags after NAME, before the command.
		if err := f.parse(c.command); err != nil {
			return c, err
		}
		c.command = f.fs.Args()
	}
	switch {
	case len(c.command) == 0:
		return c, errors.New("missing the COMMAND to run")
	case c.limit > 0 && c.shared:
		return c, errors.New("--limit and --shared do not go together: a semaphore's permits are not shared")
	}
	return c, nil
}

// limitValue is the permits of a semaphore, 1 to 10000; 0 is a plain lock.
func limitValue(p *int) value {
	v := intValue(p, 0, notNegative)
	set := v.set
	v.set = func(s string) error {
		if n, err := strconv.Atoi(s); err != nil || n < 0 || n > 10000 {
			return wantf("a number of permits from 1 to 10000")
		}
		return set(s)
	}
	return v
}

// defaultServer is the server of --server's default: $LOCKAPI_URL, as
// every SDK reads it; else $LOCKAPI_SERVER, its deprecated older name
// (with a warning on stderr); else the local server.
func defaultServer(stderr io.Writer) string {
	if s := os.Getenv("LOCKAPI_URL"); s != "" {
		return s
	}
	if s := os.Getenv("LOCKAPI_SERVER"); s != "" {
		fmt.Fprintln(stderr, "lockapi: warning: LOCKAPI_SERVER is deprecated: set LOCKAPI_URL, which the SDKs read too")
		return s
	}
	return client.DefaultURL
}

// newClient returns a client of server, with $LOCKAPI_API_KEY if set.
func newClient(server string) (*client.Client, error) {
	var opts []client.Option
	if key := os.Getenv("LOCKAPI_API_KEY"); key != "" {
		opts = append(opts, client.WithAPIKey(key))
	}
	return client.New(server, opts...)
}

// runCmd implements `lockapi run`.
func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseRunFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, runUsage)
		return 0
	}
	if err != nil {
		reportUsage(stderr, "run", err)
		return exitUsage
	}
	cl, err := newClient(c.server)
	if err != nil {
		fmt.Fprintf(stderr, "lockapi run: %s\n", errText(err))
		return exitUsage
	}

	// The signals to pass on. main's context is cancelled by the same
	// signals; this channel says which one it was.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	lease, code := acquireForRun(ctx, cl, c, sigs, stderr)
	if lease == nil {
		return code
	}
	return runLocked(ctx, c, lease, sigs, stdout, stderr)
}

// acquireForRun acquires the lock, or explains why not and returns the exit
// status.
func acquireForRun(ctx context.Context, cl *client.Client, c runConfig, sigs <-chan os.Signal, stderr io.Writer) (*client.Lease, int) {
	opts := client.AcquireOptions{Owner: c.owner, TTL: c.ttl, Shared: c.shared, Limit: c.limit, Fair: c.fair}
	start := time.Now()
	l, err := cl.Acquire(ctx, c.name, opts)
	if why := notFreeText(err, false); why != "" && c.wait > 0 {
		fmt.Fprintf(stderr, "lockapi run: lock %q is %s; waiting up to %v\n", c.name, why, c.wait)
		opts.Wait = c.wait - time.Since(start)
		l, err = cl.Acquire(ctx, c.name, opts)
	}
	if err == nil {
		return l, 0
	}

	switch why := notFreeText(err, true); {
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "lockapi run: interrupted while acquiring lock %q\n", c.name)
		return nil, interruptedStatus(sigs)
	case why != "":
		fmt.Fprintf(stderr, "lockapi run: could not get lock %q within --wait %v: %s\n", c.name, c.wait, why)
	default:
		fmt.Fprintf(stderr, "lockapi run: acquire lock %q: %s\n", c.name, errText(err))
	}
	return nil, exitCode(err)
}

// notFreeText says what keeps a lock from a run when waiting may mend it:
// a holder (long adds its lease), queued waiters, or a lock-delay; "" for
// any other error.
func notFreeText(err error, long bool) string {
	if de, ok := errors.AsType[*client.LockDelayError](err); ok {
		return fmt.Sprintf("closed for a lock-delay (%v more)", de.Remaining.Round(time.Millisecond))
	}
	he, ok := errors.AsType[*client.HeldError](err)
	switch {
	case !ok:
		return ""
	case he.Owner == "":
		return fmt.Sprintf("free, but %d queued waiters come first", he.QueueLength)
	case long:
		return fmt.Sprintf("held by %q (fencing token %d, expires in %v unless renewed)", he.Owner, he.Token, he.ExpiresIn.Round(time.Millisecond))
	}
	return fmt.Sprintf("held by %q", he.Owner)
}

// interruptedStatus is the exit status after an interruption: 128 plus the
// signal, as a shell reports it.
func interruptedStatus(sigs <-chan os.Signal) int {
	select {
	case s := <-sigs:
		if n, ok := s.(syscall.Signal); ok {
			return 128 + int(n)
		}
	default:
	}
	return 128 + int(syscall.SIGINT)
}

// runLocked runs the command under the lease, releases the lease, and
// returns the exit status.
func runLocked(ctx context.Context, c runConfig, l *client.Lease, sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	release := func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		return l.Release(rctx)
	}

	// A writer that is not a file is shared by the command's output copier
	// and this function's messages.
	if _, ok := stderr.(*os.File); !ok {
		stderr = &lockedWriter{w: stderr}
	}
	if _, ok := stdout.(*os.File); !ok {
		stdout = &lockedWriter{w: stdout}
	}

	cmd := exec.Command(c.command[0], c.command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(),
		"LOCKAPI_LOCK="+l.Name(),
		"LOCKAPI_LEASE_ID="+l.ID(),
		"LOCKAPI_FENCING_TOKEN="+strconv.FormatUint(l.Token(), 10),
	)
	// Output copied through pipes may be held open by the command's own
	// children; do not wait for them long after the command has exited.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		code := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = exitNotFound
		}
		fmt.Fprintf(stderr, "lockapi run: %v\n", err)
		if err := release(); err != nil {
			fmt.Fprintf(stderr, "lockapi run: %s\n", errText(err))
		}
		return code
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var (
		lost      = l.Lost()
		ctxDone   = ctx.Done()
		kill      <-chan time.Time
		forwarded bool
		leaseLost bool
		waitErr   error
	)
	signalCmd := func(s os.Signal) {
		if err := cmd.Process.Signal(s); err != nil && !errors.Is(err, os.ErrProcessDone) {
			fmt.Fprintf(stderr, "lockapi run: signal the command: %v\n", err)
		}
	}
	passOn := func(s os.Signal) {
		// Ctrl-C reached the command already: the terminal signals its
		// whole foreground process group. A second SIGINT would make many
		// programs give up their graceful stop.
		if s == os.Interrupt && signalFromTerminal() {
			return
		}
		signalCmd(s)
	}
	terminate := func() {
		signalCmd(syscall.SIGTERM)
		if kill == nil {
			kill = time.After(c.grace)
		}
	}
wait:
	for {
		select {
		case waitErr = <-exited:
			break wait
		case s := <-sigs:
			passOn(s)
			forwarded = true
		case <-ctxDone:
			// A signal cancels ctx too, and is then already in sigs: pass
			// that on rather than a second one. Otherwise ctx was
			// cancelled by whoever called run.
			ctxDone = nil
			select {
			case s := <-sigs:
				passOn(s)
				forwarded = true
			default:
			}
			if !forwarded {
				terminate()
			}
		case <-lost:
			lost, leaseLost = nil, true
			fmt.Fprintf(stderr, "lockapi run: %s\n", errText(l.Err()))
			fmt.Fprintf(stderr, "lockapi run: sending SIGTERM to the command (pid %d), SIGKILL in %v unless it exits\n", cmd.Process.Pid, c.grace)
			terminate()
		case <-kill:
			kill = nil
			fmt.Fprintf(stderr, "lockapi run: the command (pid %d) did not exit within %v; sending SIGKILL\n", cmd.Process.Pid, c.grace)
			signalCmd(syscall.SIGKILL)
		}
	}

	code := exitStatus(waitErr)
	err := release()
	switch {
	case leaseLost:
		return exitLeaseLost
	case errors.Is(err, client.ErrLeaseLost):
		fmt.Fprintf(stderr, "lockapi run: %s\nlockapi run: the lease ended before the release, so the command may not have run alone\n", errText(err))
		return exitLeaseLost
	case err != nil:
		fmt.Fprintf(stderr, "lockapi run: %s\n", errText(err))
	}
	return code
}

// exitStatus is the exit status of a command that Wait returned err for:
// its exit code, or 128 plus the signal that killed it.
func exitStatus(err error) int {
	if err == nil || errors.Is(err, exec.ErrWaitDelay) {
		return 0
	}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return exitCannotExec
}

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
