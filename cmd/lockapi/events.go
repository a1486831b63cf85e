package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lockapi/lockapi/client"
	"github.com/lockapi/lockapi/event"
)

// eventsUsage is the help of `lockapi events`; it lists the event types
// of package event.
var eventsUsage = fmt.Sprintf(`usage: lockapi events [flags]

Prints every change of the locks as it happens, one line per event: time,
type, lock, owner, fencing token and the holds left. It runs until
interrupted (SIGINT, SIGTERM), and rides out a dropped connection or a
server restart: it resumes after the last event it printed, and says on
stderr why and where from each time it reconnects.

Flags:
  --server URL   lockapi server (default $LOCKAPI_URL, else http://localhost:8080)
  --lock NAME    only the events of the lock NAME
  --prefix P     only the events of locks whose names start with P
  --types T,...  only these types: %s
  --after ID     start after the event ID (a previous run's last), or with
                 the oldest event the server keeps (--after 0), rather than
                 with the next event
  --json         print each event as a JSON object, one per line

$LOCKAPI_API_KEY, when set, is sent as the bearer token; the key's name
patterns decide which locks' events are shown.

Exit status: 0 when interrupted; 2 usage error, input the server refused,
or an --after older than the server's event log keeps; 69 the server was
unavailable, failed or records no events; 77 the server refused the API key.
`, wrapList(event.TypeList(), 17, 73))

// eventsCmd implements `lockapi events`.
func eventsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported below
	fs.Usage = func() {}
	server := fs.String("server", defaultServer(stderr), "")
	var opts client.EventsOptions
	fs.StringVar(&opts.Lock, "lock", "", "")
	fs.StringVar(&opts.Prefix, "prefix", "", "")
	types := fs.String("types", "", "")
	fs.StringVar(&opts.After, "after", "", "")
	asJSON := fs.Bool("json", false, "")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, eventsUsage)
		return 0
	} else if err != nil {
		reportUsage(stderr, "events", err)
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		reportUsage(stderr, "events", fmt.Errorf("unexpected argument %q", fs.Arg(0)))
		return exitUsage
	case opts.Lock != "" && opts.Prefix != "":
		reportUsage(stderr, "events", errors.New("--lock and --prefix do not go together"))
		return exitUsage
	}
	if *types != "" {
		for t := range strings.SplitSeq(*types, ",") {
			opts.Types = append(opts.Types, client.EventType(strings.TrimSpace(t)))
		}
	}

	cl, err := newClient(*server)
	if err != nil {
		fmt.Fprintf(stderr, "lockapi events: %s\n", errText(err))
		return exitUsage
	}
	opts.OnReconnect = func(err error, after string, pause time.Duration) {
		from := "after " + after
		switch after {
		case "":
			from = "with the next event"
		case "0":
			from = "with the oldest event kept"
		}
		fmt.Fprintf(stderr, "lockapi events: the stream ended (%s); reconnecting in %v, resuming %s\n", errText(err), pause.Round(time.Millisecond), from)
	}
	for ev, err := range cl.Events(ctx, opts) {
		if err != nil {
			return eventsError(ctx, err, stderr)
		}
		if *asJSON {
			// The event as the server wrote it: event.Marshal is the
			// server's own writer, and fails on no event.
			line, _ := event.Marshal(ev)
			fmt.Fprintf(stdout, "%s\n", line)
		} else {
			fmt.Fprintln(stdout, eventLine(ev))
		}
	}
	return 0
}

// eventsError explains why the events stopped, and returns the exit status.
func eventsError(ctx context.Context, err error, stderr io.Writer) int {
	if ctx.Err() != nil {
		return 0 // interrupted: the way to stop
	}
	fmt.Fprintf(stderr, "lockapi events: %s\n", errText(err))
	if pe, ok := errors.AsType[*client.ProblemError](err); ok && pe.Type == problemEventsGone {
		fmt.Fprintln(stderr, "lockapi events: start again without --after")
	}
	return exitCode(err)
}

// wrapList breaks the comma-separated list of --types into lines of at most
// width characters (a comma included), each after the first indented by
// indent spaces.
func wrapList(list string, indent, width int) string {
	var b strings.Builder
	col := indent + len("only these types: ")
	for i, item := range strings.Split(list, ", ") {
		if i > 0 {
			b.WriteString(",")
			col++
			if col+1+len(item)+1 > width {
				b.WriteString("\n" + strings.Repeat(" ", indent))
				col = indent
			} else {
				b.WriteString(" ")
				col++
			}
		}
		b.WriteString(item)
		col += len(item)
	}
	return b.String()
}

// eventLine is an event for people: time, type, lock, owner, token, holds.
func eventLine(ev client.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %-14s  %s  owner=%s  token=%d  holds=%d", event.FormatTime(ev.Time), ev.Type, ev.Lock, ev.Owner, ev.FencingToken, ev.HoldCount)
	if ev.Mode == event.Shared {
		b.WriteString("  shared")
	}
	if ev.Type == client.EventForceReleased && ev.Principal != "" {
		fmt.Fprintf(&b, "  by=%s", ev.Principal)
	}
	if ev.Type == client.EventUpdated {
		md := ev.Metadata
		if md == nil {
			md = map[string]string{}
		}
		j, _ := json.Marshal(md) // a map of strings always encodes, keys sorted
		fmt.Fprintf(&b, "  metadata=%s", j)
	}
	return b.String()
}
