package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/lockapi/lockapi/client"
	"github.com/lockapi/lockapi/event"
)

const statusUsage = `usage: lockapi status [flags] NAME

Prints the state of the lock NAME: who holds it, with which fencing token,
and until when; for a read-write lock or a semaphore, every holder; how
many waiters are queued; and what is left of a lock-delay that closes it.

Flags:
  --server URL   lockapi server (default $LOCKAPI_URL, else http://localhost:8080)
  --json         print the state as one line of JSON, in the form of the
                 server's answer (LockState in openapi.yaml)

$LOCKAPI_API_KEY, when set, is sent as the bearer token.

Exit status: 0 whether the lock is held or free; 2 usage error or a bad
NAME; 69 the server was unavailable or failed; 77 the server refused the API
key.
`

// statusCmd implements `lockapi status`.
func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported below
	fs.Usage = func() {}
	server := fs.String("server", defaultServer(stderr), "")
	asJSON := fs.Bool("json", false, "")
	// Flags may come before or after NAME.
	var names []string
	for rest := args; ; {
		if err := fs.Parse(rest); errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, statusUsage)
			return 0
		} else if err != nil {
			reportUsage(stderr, "status", err)
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		names = append(names, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(names) != 1 {
		reportUsage(stderr, "status", fmt.Errorf("want one lock NAME, got %d", len(names)))
		return exitUsage
	}
	name := names[0]

	cl, err := newClient(*server)
	if err != nil {
		fmt.Fprintf(stderr, "lockapi status: %s\n", errText(err))
		return exitUsage
	}
	st, err := cl.Inspect(ctx, name)
	if err != nil {
		fmt.Fprintf(stderr, "lockapi status: %s\n", errText(err))
		return exitCode(err)
	}
	if *asJSON {
		line, _ := json.Marshal(st)
		fmt.Fprintf(stdout, "%s\n", line)
		return 0
	}
	printState(stdout, st, time.Now())
	return 0
}

// printState writes a lock's state as aligned "field: value" lines. An
// exclusive lock shows its holder's lease field by field; readers and a
// semaphore's permits show one line per holder.
func printState(w io.Writer, st *client.LockState, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	line := func(k, format string, args ...any) {
		fmt.Fprintf(tw, "%s:\t"+format+"\n", append([]any{k}, args...)...)
	}
	defer tw.Flush()
	line("lock", "%s", st.Lock)
	queue := func() {
		if st.QueueLength > 0 {
			line("queue", "%d waiters", st.QueueLength)
		}
	}
	closed := func() {
		if st.LockDelay > 0 {
			line("lock-delay", "%v more: closed to new grants until then (a session's lease ended)", st.LockDelay.Round(time.Millisecond))
		}
	}
	if !st.Held {
		line("state", "free")
		closed()
		if st.LastToken == 0 {
			line("last token", "none: never acquired")
		} else {
			line("last token", "%d", st.LastToken)
		}
		queue()
		return
	}
	line("state", "held")
	closed()
	if h := st.Holder; h != nil {
		line("owner", "%s", h.Owner)
		line("fencing token", "%d", h.Token)
		line("holds", "%d", h.HoldCount)
		line("acquired", "%s (%s ago)", event.FormatTime(h.AcquiredAt), roundAgo(now.Sub(h.AcquiredAt)))
		line("expires", "%s", expiresText(h.ExpiresAt, now))
		if h.Session != "" {
			line("session", "%s (the lease lives as long as it)", h.Session)
		}
		for _, k := range slices.Sorted(maps.Keys(h.Metadata)) {
			line("metadata", "%s=%s", k, h.Metadata[k])
		}
	}
	others := 0
	for _, h := range st.Holders {
		if st.Holder == nil || h.Token != st.Holder.Token {
			others++
		}
	}
	switch {
	case st.Mode == client.ModeSemaphore:
		line("mode", "semaphore: %d of %d permits held", len(st.Holders), st.Limit)
	case st.Holder == nil:
		line("mode", "shared: %d readers", others)
	case others > 0:
		line("also", "%d shared lease(s) of the same owner (a downgrade)", others)
	}
	for _, h := range st.Holders {
		if st.Holder != nil && h.Token == st.Holder.Token {
			continue
		}
		mode := "exclusive"
		switch {
		case st.Mode == client.ModeSemaphore:
			mode = "permit"
		case h.Shared:
			mode = "shared"
		}
		bound := ""
		if h.Session != "" {
			bound = ", session " + h.Session
		}
		line("holder", "%s (%s), token %d, %d hold(s), expires %s%s", h.Owner, mode, h.Token, h.HoldCount, expiresText(h.ExpiresAt, now), bound)
	}
	queue()
}

// expiresText says when a lease ends.
func expiresText(at, now time.Time) string {
	if left := at.Sub(now); left > 0 {
		return fmt.Sprintf("%s (in %s unless renewed)", event.FormatTime(at), roundAgo(left))
	}
	return event.FormatTime(at) + " (now)"
}

// roundAgo rounds a span for people: tenths of seconds below a minute,
// whole seconds above.
func roundAgo(d time.Duration) time.Duration {
	if d < time.Minute {
		return max(d.Round(100*time.Millisecond), 0)
	}
	return d.Round(time.Second)
}
